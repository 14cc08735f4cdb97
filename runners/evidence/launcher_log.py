"""What torchrun's own stderr says about its ranks: whom it stopped and when, exit codes, its Root Cause record, and
an error of its own (its rendezvous store gone, a port taken).

It also folds the SignalException traceback torchrun prints when it is stopped by a signal into one line.
"""
from __future__ import annotations

import re
import time
from dataclasses import dataclass

from .signals import signame

# glog-style lines of torch.distributed.elastic: "W1203 07:47:22.826000 6435 .../api.py:1028] message"
_GLOG = re.compile(r"^[IWEF](\d\d)(\d\d) (\d\d):(\d\d):(\d\d)\.(\d+) +\d+ [^\]]*\] (.*)$")
_SENDING = re.compile(r"Sending process (\d+) closing signal (SIG\w+)")
_FORCED = re.compile(r"Unable to shutdown process (\d+) via \S+, forcefully exiting via (\S+)")
_FAILED = re.compile(r"failed \(exitcode: (-?\d+)\) local_rank: (\d+) \(pid: (\d+)\)")
_RECEIVED = re.compile(r"Received (\d+) death signal")
# torch.distributed.elastic's agent (api.py, logged at INFO: shown with LOGLEVEL=INFO)
_RESTART = re.compile(r"Worker group (\w+)\. (\d+)/(\d+) attempts left; will restart worker group")
# the ChildFailedError table
_ROOT_HEAD = "Root Cause (first observed failure):"
_RANK = re.compile(r"^\s*rank\s*:\s*(\d+)(?:\s*\(local_rank:\s*(\d+)\))?")
_EXIT = re.compile(r"^\s*exitcode\s*:\s*(-?\d+)(?:\s*\(pid:\s*(\d+)\))?")
_TIME = re.compile(r"^\s*time\s*:\s*(\d{4}-\d\d-\d\d_\d\d:\d\d:\d\d)")
_ERRFILE = re.compile(r"^\s*error_file\s*:\s*(.+?)\s*$")
_SIGNAL_EXC = re.compile(r"SignalException: Process (\d+) got signal: (\d+)")
_TRACEBACK = "Traceback (most recent call last):"
_CHAINED = ("During handling of the above exception, another exception occurred:",
            "The above exception was the direct cause of the following exception:")
# the last line of a traceback: "torch.distributed.elastic.rendezvous.api.RendezvousConnectionError: The connection..."
_EXCEPTION = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Timeout)\w*)(?::\s*(.*))?$")
# what the agent raises over its ranks' own failures: theirs are the verdict, not the agent's
_RANKS_FAILED = ("ChildFailedError",)
# a traceback frame in torchrun's own code: its entry point, the elastic agent, its launcher API
_TORCHRUN_FRAME = re.compile(r'File "[^"]*(?:/bin/torchrun|torch/distributed/(?:run\.py|elastic/|launcher/))')
MAX_HELD = 400  # a traceback longer than this is not the one we fold: show it as it is


@dataclass(frozen=True)
class Restart:
    """torchrun's agent said it restarts the worker group: in what state the group was, restarts left before this one."""

    state: str  # "FAILED" | "UNHEALTHY"
    left: int
    most: int
    when: float | None  # its glog stamp


@dataclass(frozen=True)
class AgentError:
    """An exception torchrun raised of its own (not over its ranks' failure): the run's root cause when no rank failed."""

    type: str  # its class name, without the module ("RendezvousConnectionError")
    msg: str
    lines: tuple[str, ...]  # the traceback's last lines, the exception line last
    torchrun: bool = True  # raised in torchrun's own code (a frame in torch.distributed's launcher); else another
    # launcher's (mirage, the XLA spawner's parent, a wrapper script) whose stream this log is fed as well


@dataclass
class Failure:
    """One entry of torchrun's failure table."""

    rank: int
    local_rank: int | None = None
    exitcode: int | None = None
    pid: int | None = None
    time: float | None = None  # torchrun's timestamp: whole seconds
    error_file: str | None = None
    root: bool = False  # listed under "Root Cause (first observed failure)"


def glog_wall(month: int, day: int, h: int, m: int, s: int, frac: str, now: float | None = None) -> float:
    """Wall time of a glog stamp (local time, no year: the year that puts it nearest to now)."""
    now = time.time() if now is None else now
    year = time.localtime(now).tm_year
    t = time.mktime((year, month, day, h, m, s, 0, 0, -1)) + float("0." + frac)
    if t > now + 86400:
        t = time.mktime((year - 1, month, day, h, m, s, 0, 0, -1)) + float("0." + frac)
    return t


def glog_line(line: str, now: float | None = None) -> tuple[float, str] | None:
    """(wall time of its stamp, message) of a glog-style line of torch.distributed.elastic; None for another line."""
    g = _GLOG.match(line)
    if g is None:
        return None
    month, day, hour, minute, second = (int(x) for x in g.groups()[:5])
    try:
        return glog_wall(month, day, hour, minute, second, g.group(6), now=now), g.group(7)
    except (ValueError, OverflowError):
        return None


class TorchrunLog:
    """Fed torchrun's stderr line by line; remembers what the lines say and returns the lines to show."""

    def __init__(self) -> None:
        self.stopping: dict[int, tuple[str, float | None]] = {}  # pid -> (signal name, when torchrun sent it)
        self.first_failure: tuple[int, int, int] | None = None  # (local_rank, pid, exitcode) from its error log
        self.failures: dict[int, Failure] = {}  # global rank -> table entry
        self.signalled: int | None = None  # signal number torchrun itself received
        self.restart: Restart | None = None  # its agent said it restarts the worker group (LOGLEVEL=INFO)
        self.agent_error: AgentError | None = None  # the last exception it raised of its own
        self.changed = False  # set when a line added an exit code; the reader resets it
        self._entry: Failure | None = None
        self._in_root = False
        self._pending_time: float | None = None  # an entry's time line comes before its rank line
        self._held: list[str] = []
        self._folded = False  # a SignalException traceback was just folded: its chained ones fold into it
        self.now: float | None = None  # the reader's wall clock (the year of torchrun's stamps); None: read it

    @property
    def root_rank(self) -> int | None:
        for f in self.failures.values():
            if f.root:
                return f.rank
        return None

    def exit_codes(self, pid_ranks: dict[int, int], nproc: int | None) -> list[tuple[int, int]]:
        """(global rank, exit code) for every rank torchrun reported an exit code of. pid_ranks maps the pids
        ranks announced to their ranks; nproc: this is the only agent, so its local ranks are the global ones."""
        out = {f.rank: f.exitcode for f in self.failures.values() if f.exitcode is not None}
        if self.first_failure is not None:
            local, pid, code = self.first_failure
            rank = pid_ranks.get(pid, local if nproc is not None and local < nproc else None)
            if rank is not None:
                out.setdefault(rank, code)
        return sorted(out.items())

    def pid_stopped(self, pid: int | None) -> tuple[str, float | None] | None:
        """(signal, when) torchrun sent this pid to stop it, or None."""
        return None if pid is None else self.stopping.get(pid)

    def error_file(self, rank: int) -> str | None:
        """The error file torchrun named for a failed rank (where torch's @record wrote its exception), if any."""
        f = self.failures.get(rank)
        return f.error_file if f is not None and f.error_file else None

    def feed(self, line: str, we_signalled: bool) -> list[str]:
        """The lines to show for this one (none while a traceback is held, several when it is released).

        we_signalled: ddptui is tearing the run down, so a SignalException is ddptui's doing.
        """
        if self._held:
            return self._hold(line, we_signalled)
        if line.strip() == _TRACEBACK:
            self._held = [line]
            return []
        if self._folded and (not line.strip() or line.strip() in _CHAINED):
            return []
        self._folded = False
        self._parse(line)
        return [line]

    def flush(self) -> list[str]:
        held, self._held = self._held, []
        return held

    def _hold(self, line: str, we_signalled: bool) -> list[str]:
        if line.startswith((" ", "\t")) and len(self._held) < MAX_HELD:
            self._held.append(line)
            return []
        m = _SIGNAL_EXC.search(line)
        if m:
            self._held = []
            if self._folded:  # a second signal interrupted torchrun's shutdown: already said
                return []
            self._folded = True
            self.signalled = int(m.group(2))
            name = signame(int(m.group(2)))
            if we_signalled:
                return [f"ddptui stopped the launcher ({name})"]
            return [f"the launcher (pid {m.group(1)}) was stopped by {name} from outside ddptui"]
        held = self.flush()
        self._exception(held, line)
        return held + self.feed(line, we_signalled)

    def _exception(self, held: list[str], line: str) -> None:
        """The line that ended a traceback: torchrun's own error, unless it is its ranks' failure raised again."""
        m = _EXCEPTION.match(line.strip())
        if m is None:
            return
        name = m.group(1).rsplit(".", 1)[-1]
        if name in _RANKS_FAILED:
            return
        self.agent_error = AgentError(name, (m.group(2) or "").strip(), tuple(held[-4:]) + (line,),
                                      any(_TORCHRUN_FRAME.search(h) for h in held))

    def _parse(self, line: str) -> None:
        g = _GLOG.match(line)
        if g:
            msg = g.group(7)
            when = None
            try:
                month, day, hour, minute, second = (int(x) for x in g.groups()[:5])
                when = glog_wall(month, day, hour, minute, second, g.group(6), now=self.now)
            except (ValueError, OverflowError):
                pass
            m = _SENDING.search(msg) or _FORCED.search(msg)
            if m:
                self.stopping[int(m.group(1))] = (m.group(2).split(".")[-1], when)
                return
            m = _FAILED.search(msg)
            if m:
                self.first_failure = (int(m.group(2)), int(m.group(3)), int(m.group(1)))
                self.changed = True
                return
            m = _RECEIVED.search(msg)
            if m:
                self.signalled = int(m.group(1))
            m = _RESTART.search(msg)
            if m:
                self.restart = Restart(m.group(1), int(m.group(2)), int(m.group(3)), when)
            return
        if line.strip() == _ROOT_HEAD:
            self._in_root = True
            return
        m = _RANK.match(line)
        if m:
            self._entry = Failure(int(m.group(1)), int(m.group(2)) if m.group(2) else None, time=self._pending_time,
                                  root=self._in_root)
            self._pending_time = None
            self.failures[self._entry.rank] = self._entry
            return
        m = _TIME.match(line)
        if m:
            try:
                self._pending_time = time.mktime(time.strptime(m.group(1), "%Y-%m-%d_%H:%M:%S"))
            except (ValueError, OverflowError):
                self._pending_time = None
            return
        if self._entry is None:
            return
        m = _EXIT.match(line)
        if m:
            self._entry.exitcode = int(m.group(1))
            self._entry.pid = int(m.group(2)) if m.group(2) else None
            self.changed = True
            return
        m = _ERRFILE.match(line)
        if m:
            path = m.group(1)
            self._entry.error_file = None if path == "<N/A>" else path
            self._entry = None


def error_file_report(data: dict) -> dict | None:
    """{"type", "msg", "where", "tb"} from torch elastic's error-file JSON ({"message": {"message": "T: msg",
    "extraInfo": {"py_callstack": ..., "timestamp": ...}}}); None when it holds no message."""
    msg = data.get("message") if isinstance(data, dict) else None
    if isinstance(msg, str):
        text, tb = msg, ""
    elif isinstance(msg, dict):
        text = str(msg.get("message", ""))
        tb = str((msg.get("extraInfo") or {}).get("py_callstack", ""))
    else:
        return None
    if not text:
        return None
    typ, _, rest = text.partition(": ")
    where = ""
    frames = re.findall(r'File "([^"]+)", line (\d+)', tb)
    if frames:
        where = f"{frames[-1][0]}:{frames[-1][1]}"
    return {"type": typ, "msg": rest if rest else text, "where": where, "tb": tb.splitlines()[-15:]}
