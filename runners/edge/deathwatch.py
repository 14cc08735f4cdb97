"""When (and how) ranks we did not spawn ourselves really died: a thread blocked on their pidfds notes the moment.

Under torchrun the ranks are the launcher's children: it reaps them and reports exit codes only in its final table,
and our own loop notices a death only at its next turn. A pidfd turns readable the moment its process exits, before
the parent reaps it (torchrun polls every 0.1 s), so the thread wakes at once, notes the wall time, and reads the
exit status the kernel keeps for the zombie in /proc/<pid>/stat (field 52, Linux >= 3.5) while it is still there.
"""
from __future__ import annotations

import os
import select
import threading
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class Death:
    pid: int
    wall: float  # when the pidfd fired (or when we found the process already gone)
    returncode: int | None  # Popen convention (negative: signal); None when the parent reaped it first
    exact: bool  # False: it was gone before we watched it, so `wall` is only an upper bound


def wait_status_to_returncode(status: int) -> int:
    if os.WIFSIGNALED(status):
        return -os.WTERMSIG(status)
    return os.WEXITSTATUS(status)


def parse_stat_exit(stat: str) -> tuple[str, int | None]:
    """(state, returncode or None) from the text of /proc/<pid>/stat; the code only for a zombie."""
    rest = stat[stat.rindex(")") + 2:].split()
    state = rest[0] if rest else "?"
    if state != "Z" or len(rest) < 50:
        return state, None
    return state, wait_status_to_returncode(int(rest[49]))


def zombie_returncode(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return parse_stat_exit(f.read())[1]
    except (OSError, ValueError, IndexError):
        return None


class DeathWatch:
    """watch(pid) from the engine; deaths() returns what happened since the last call. One daemon thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._fds: dict[int, int] = {}  # fd -> pid
        self._done: list[Death] = []
        self._watched: set[int] = set()
        self._blind: set[int] = set()  # pids we could not open a pidfd for (old kernel): the caller polls them
        self._wake_r = self._wake_w = -1  # the thread's wake-up pipe, made with the thread
        self._closed = False
        self._thread: threading.Thread | None = None

    def watch(self, pid: int) -> None:
        if pid in self._watched or self._closed:
            return
        self._watched.add(pid)
        try:
            fd = os.pidfd_open(pid)
        except ProcessLookupError:
            with self._lock:
                self._done.append(Death(pid, time.time(), None, False))
            return
        except (AttributeError, OSError):
            self._blind.add(pid)
            return
        rc = zombie_returncode(pid)
        if rc is not None:  # already dead, not yet reaped
            os.close(fd)
            with self._lock:
                self._done.append(Death(pid, time.time(), rc, False))
            return
        with self._lock:
            self._fds[fd] = pid
        if self._thread is None:
            self._wake_r, self._wake_w = os.pipe()
            self._thread = threading.Thread(target=self._run, name="ddptui-deathwatch", daemon=True)
            self._thread.start()
        os.write(self._wake_w, b"x")

    def watching(self, pid: int) -> bool:
        """True when this pid's death will be reported by deaths()."""
        return pid in self._watched and pid not in self._blind

    def deaths(self) -> list[Death]:
        with self._lock:
            out, self._done = self._done, []
        return out

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._thread is not None:
            os.write(self._wake_w, b"q")
            self._thread.join(timeout=2.0)
        with self._lock:
            for fd in self._fds:
                os.close(fd)
            self._fds.clear()
        if self._thread is not None:
            os.close(self._wake_r)
            os.close(self._wake_w)

    def _run(self) -> None:
        poller = select.poll()
        poller.register(self._wake_r, select.POLLIN)
        registered: set[int] = set()
        while not self._closed:
            with self._lock:
                for fd in self._fds:
                    if fd not in registered:
                        poller.register(fd, select.POLLIN)
                        registered.add(fd)
            ready = poller.poll()
            wall = time.time()
            for fd, _ in ready:
                if fd == self._wake_r:
                    os.read(self._wake_r, 4096)
                    continue
                with self._lock:
                    pid = self._fds.pop(fd, None)
                if pid is None:
                    continue
                rc = zombie_returncode(pid)
                poller.unregister(fd)
                registered.discard(fd)
                os.close(fd)
                with self._lock:
                    self._done.append(Death(pid, wall, rc, True))
