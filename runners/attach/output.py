"""Where an outside rank's stdout/stderr go (/proc/PID/fd/1, 2), whether ddptui can follow them, and their last lines."""
from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass

LAST_LINES = 200  # lines shown from before the attach
_BLOCK = 64 * 1024
_PIPE = re.compile(r"^pipe:\[(\d+)\]$")
_SOCKET = re.compile(r"^socket:\[(\d+)\]$")
_STREAM = {1: "stdout", 2: "stderr"}


@dataclass(frozen=True)
class RankOutput:
    kind: str  # "file" | "terminal" | "pipe" | "socket" | "none" | "unreadable"
    path: str | None  # the file to tail when kind == "file"
    note: str  # what the pane says when ddptui cannot follow it, "" for files


@dataclass(frozen=True)
class FdLink:
    """What /proc/PID/fd/N said: the link's text, the kind of file it names (stat's S_IFMT bits, 0 when unknown), or
    why it could not be read (error: "denied", "closed", or "gone" when the process ended)."""

    pid: int
    fd: int
    link: str = ""
    mode: int = 0
    error: str = ""


def classify(f: FdLink, reader: str = "") -> RankOutput:
    """The pane's source for one stream of a rank, from its fd link; pure. reader: who reads a pipe ("tee (pid 7)")."""
    what = f"the rank's {_STREAM.get(f.fd, f'fd {f.fd}')}"
    if f.error == "denied":
        return RankOutput("unreadable", None, f"ddptui cannot see where {what} goes: /proc/{f.pid}/fd/{f.fd} is not "
                                              "readable by this user (another user's process: run ddptui as that "
                                              "user or root)")
    if f.error == "gone":
        return RankOutput("none", None, f"process {f.pid} has ended")
    if f.error or not f.link:
        return RankOutput("none", None, f"{what} is closed: it writes nowhere")
    link = f.link
    if link.endswith(" (deleted)") and link.startswith("/"):
        # the inode lives while the rank holds it open: /proc/PID/fd/N still reads it
        return RankOutput("file", f"/proc/{f.pid}/fd/{f.fd}",
                          f"{what} goes to {link[:-len(' (deleted)')]}, a file deleted since: followed through "
                          f"/proc/{f.pid}/fd/{f.fd} while the rank lives")
    m = _PIPE.match(link)
    if m or (link.startswith("/") and stat.S_ISFIFO(f.mode)):
        by = f", read by {reader}" if reader else ""
        return RankOutput("pipe", None, f"{what} goes to a pipe ({link}{by}): ddptui cannot read a pipe another "
                                        "process reads; its lines show where that reader puts them")
    if _SOCKET.match(link) or (link.startswith("/") and stat.S_ISSOCK(f.mode)):
        return RankOutput("socket", None, f"{what} goes to a socket ({link}, e.g. journald or a notebook kernel): "
                                          "ddptui cannot read it")
    if link == "/dev/null":
        return RankOutput("none", None, f"{what} goes to /dev/null: the rank's lines are discarded")
    if link.startswith("/dev/pts/") or link.startswith("/dev/tty") or link == "/dev/console":
        return RankOutput("terminal", None, f"{what} goes to the terminal {link}: ddptui cannot read a terminal, "
                                            "its lines show only there")
    if link.startswith("/") and stat.S_ISREG(f.mode):
        return RankOutput("file", link, "")
    if link.startswith("/") and stat.S_ISCHR(f.mode):
        return RankOutput("none", None, f"{what} goes to the device {link}: ddptui cannot read it")
    return RankOutput("none", None, f"{what} goes to {link}: not a file ddptui can follow")


def read_link(pid: int, fd: int) -> FdLink:
    """/proc/PID/fd/FD read (the I/O edge of `classify`)."""
    path = f"/proc/{pid}/fd/{fd}"
    try:
        link = os.readlink(path)
    except PermissionError:
        return FdLink(pid, fd, error="denied")
    except FileNotFoundError:
        return FdLink(pid, fd, error="closed" if os.path.isdir(f"/proc/{pid}") else "gone")
    except OSError as e:
        return FdLink(pid, fd, error=e.strerror or str(e))
    try:
        mode = stat.S_IFMT(os.stat(path).st_mode)
    except OSError:
        mode = 0
    return FdLink(pid, fd, link, mode)


def pipe_reader(link: str, writers: set[int]) -> str:
    """Who holds the read end of pipe `link` ("tee (pid 7)"), other than the job's own `writers`; "" if not found."""
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) in writers:
            continue
        pid = int(name)
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") != link:
                    continue
                with open(f"/proc/{pid}/fdinfo/{fd}") as info:
                    flags = next((int(ln.split()[1], 8) for ln in info if ln.startswith("flags:")), 1)
                if flags & os.O_ACCMODE == os.O_RDONLY:
                    with open(f"/proc/{pid}/comm") as comm:
                        return f"{comm.read().strip()} (pid {pid})"
            except (OSError, ValueError):
                continue
    return ""


def rank_output(pid: int, fd: int, job_pids: set[int] | None = None) -> RankOutput:
    """Where rank `pid`'s stdout (fd 1) or stderr (fd 2) goes, as the pane's source."""
    f = read_link(pid, fd)
    reader = pipe_reader(f.link, (job_pids or set()) | {pid}) if _PIPE.match(f.link) else ""
    return classify(f, reader)


def split_tail(data: bytes, n: int) -> tuple[list[str], int]:
    """The last `n` complete lines of `data` (the end of a file) and where they end within it: a line still being
    written (no newline yet) is left for the tailer, which starts at that offset; pure."""
    end = data.rfind(b"\n") + 1
    if end == 0:
        return [], 0
    lines = data[:end - 1].split(b"\n")
    return [ln.decode("utf-8", "replace").rstrip("\r") for ln in lines[-n:]] if n > 0 else [], end


def last_lines(path: str, n: int = LAST_LINES) -> tuple[list[str], int]:
    """The last `n` complete lines of file `path` and the offset the tailer follows from (just after them)."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        start, data = size, b""
        while start > 0 and data.count(b"\n") <= n:
            step = min(_BLOCK, start)
            start -= step
            f.seek(start)
            data = f.read(step) + data
    lines, end = split_tail(data, n)  # the first line of a block that starts mid-file is cut: n leaves it out
    return lines, start + end
