"""Starting processes in their own sessions and tearing whole process trees down: TERM, deadline, KILL."""
from __future__ import annotations

import ctypes
import os
import select
import signal
import subprocess
import threading
import time
from collections.abc import Set
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from ..launch.plan import ProcSpec

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
_libc = None
_orphans: set[int] = set()  # re-parented processes of our runs, reaped by reap_orphans()


def _prctl(option: int, value: int) -> bool:
    global _libc
    try:
        if _libc is None:
            _libc = ctypes.CDLL(None, use_errno=True)
        return _libc.prctl(option, value, 0, 0, 0) == 0
    except Exception:
        return False


_subreaping = [0]  # runs of this process that asked to be the subreaper and have not ended
_subreaper_lock = threading.Lock()


def become_subreaper() -> bool:
    """Orphaned grandchildren (ranks of a launcher that died) are re-parented to us, so we can kill them.

    Only while a run needs it: call stop_subreaping() when the run ends. A process that stays a subreaper adopts
    every later orphan below it for good, e.g. the forks of a Slurm daemon a test process started, that nobody
    then reaps (the job hangs COMPLETING)."""
    with _subreaper_lock:
        _subreaping[0] += 1
        return _prctl(_PR_SET_CHILD_SUBREAPER, 1)


def stop_subreaping() -> None:
    """One run that called become_subreaper() ended; the last one hands orphans back to init."""
    with _subreaper_lock:
        _subreaping[0] = max(0, _subreaping[0] - 1)
        if _subreaping[0] == 0:
            _prctl(_PR_SET_CHILD_SUBREAPER, 0)


def _child_setup() -> None:
    # If ddptui dies hard, its direct children (launchers, ranks) get SIGTERM instead of training on.
    _prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


@dataclass
class Spawned:
    """A process ddptui started (a launcher or a rank), with its log files and, once it ended, its exit."""

    spec: ProcSpec
    popen: subprocess.Popen
    started: float
    returncode: int | None = None
    exited: float | None = None
    files: list = field(default_factory=list)
    pidfd: int | None = None  # readable once the process exits: lets the engine sleep until then

    @property
    def pid(self) -> int:
        return self.popen.pid

    def poll(self) -> int | None:
        if self.returncode is None:
            rc = self.popen.poll()
            if rc is not None:
                self.returncode, self.exited = rc, time.time()
                self._close_pidfd()
        return self.returncode

    def _close_pidfd(self) -> None:
        if self.pidfd is not None:
            os.close(self.pidfd)
            self.pidfd = None


def _pidfd(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):  # kernels before 5.3: the loop just sleeps
        return None


def sleep_until_exit(procs: list[Spawned], timeout: float, also: int | None = None) -> None:
    """Sleep up to `timeout` seconds, waking at once when one of the running processes exits (or `also`,
    another file descriptor, turns readable)."""
    fds = [p.pidfd for p in procs if p.returncode is None and p.pidfd is not None]
    if also is not None:
        fds.append(also)
    if fds:
        select.select(fds, [], [], timeout)
    else:
        time.sleep(timeout)


class SpawnError(Exception):
    pass


def spawn(spec: ProcSpec) -> Spawned:
    for p in (spec.stdout, spec.stderr):
        Path(p).parent.mkdir(parents=True, exist_ok=True)
    out = open(spec.stdout, "ab", buffering=0)
    err = out if spec.stderr == spec.stdout else open(spec.stderr, "ab", buffering=0)
    try:
        popen = subprocess.Popen(
            list(spec.argv), env={**os.environ, **spec.env}, cwd=spec.cwd, stdin=subprocess.DEVNULL,
            stdout=out, stderr=err, start_new_session=True, preexec_fn=_child_setup, close_fds=True,
        )
    except OSError as e:
        out.close()
        err.close()
        raise SpawnError(f"cannot start {spec.name}: {spec.argv[0]}: {e.strerror or e}") from None
    return Spawned(spec, popen, time.time(), files=[out, err], pidfd=_pidfd(popen.pid))


def _alive(pid: int) -> bool:
    try:
        p = psutil.Process(pid)
        return p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _signal_tree(pids: set[int], sig: int) -> None:
    """Each process group once, then each pid outside those groups: a second SIGTERM to torchrun lands in
    its own shutdown and aborts it halfway (a chained SignalException, ranks signalled twice)."""
    groups: set[int] = set()
    for pid in pids:
        try:
            groups.add(os.getpgid(pid))
        except (ProcessLookupError, PermissionError):
            pass
    for pgid in groups:
        try:
            os.killpg(pgid, sig)
        except (ProcessLookupError, PermissionError):
            pass
    for pid in pids:
        try:
            if os.getpgid(pid) in groups:
                continue
        except (ProcessLookupError, PermissionError):
            continue
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def end_ranks(pids: Set[int], grace: float = 2.0) -> None:
    """End these ranks, not their launcher: SIGTERM (a rank that leads its own process group, as torchrun starts them,
    with its group: its DataLoader workers), then SIGKILL to those still alive after `grace` s (a program may catch
    SIGTERM). torchrun then restarts the worker group."""
    def send(sig: int, targets: set[int]) -> None:
        for pid in targets:
            try:
                if os.getpgid(pid) == pid:
                    os.killpg(pid, sig)
                else:
                    os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
    send(signal.SIGTERM, set(pids))
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.05)
    send(signal.SIGKILL, {p for p in pids if _alive(p)})


def tree_pids(procs: list[Spawned], extra: Set[int] = frozenset()) -> set[int]:
    """Every live process of the run: ours, their descendants, ranks that announced themselves, our orphans."""
    pids = set(extra)
    for p in procs:
        pids.add(p.pid)
        try:
            pids.update(c.pid for c in psutil.Process(p.pid).children(recursive=True))
        except psutil.Error:
            pass
    # Orphans re-parented to us (we are their subreaper) are our children now.
    try:
        own = {p.pid for p in procs}
        for c in psutil.Process().children(recursive=True):
            if c.pid not in own and _belongs_to_run(c, procs):
                pids.add(c.pid)
                _orphans.add(c.pid)
    except psutil.Error:
        pass
    return {pid for pid in pids if _alive(pid)}


def _belongs_to_run(proc: psutil.Process, procs: list[Spawned]) -> bool:
    try:
        env = proc.environ()
    except psutil.Error:
        return False
    return env.get("DDPTUI_PID") == str(os.getpid())


KILL_WAIT = 2.0  # seconds a SIGKILLed process gets to vanish before teardown gives up on it
_PS_STATE = {"running": "R", "sleeping": "S", "disk-sleep": "D", "stopped": "T", "tracing-stop": "t",
             "zombie": "Z", "dead": "X", "idle": "I"}


def _state(pid: int) -> str:
    try:
        return psutil.Process(pid).status()
    except psutil.Error:
        return "gone"


def teardown(procs: list[Spawned], extra: Set[int] = frozenset(), deadline: float = 5.0, kill_wait: float = KILL_WAIT,
             hurry=None) -> dict:
    """SIGTERM every process group of the run, SIGKILL what is left at `deadline`, wait `kill_wait` more, then
    give up and report the survivors (as torch elastic's _close does: a process in uninterruptible sleep, D
    state, outlives even SIGKILL, and waiting on it would wedge ddptui). The deadlines are fixed at the start
    and never re-armed; every process is signalled at most once per signal. `hurry()` true: SIGKILL now.

    Returns {"seconds", "killed" (SIGKILL was needed), "survivors": [{"pid", "state"}]}."""
    t0 = time.monotonic()
    term_end, kill_end = t0 + deadline, None
    pids = tree_pids(procs, extra)
    termed: set[int] = set(pids)
    killed: set[int] = set()
    _signal_tree(pids, signal.SIGTERM)
    while True:
        for p in procs:
            p.poll()
        pids = {pid for pid in pids | tree_pids(procs) if _alive(pid)}
        if not pids:
            break
        now = time.monotonic()
        if kill_end is None and (now >= term_end or (hurry is not None and hurry())):
            kill_end = now + kill_wait
        if kill_end is not None:
            if now >= kill_end:
                break
            _signal_tree(pids - killed, signal.SIGKILL)  # once each, newcomers too
            killed |= pids
        else:
            _signal_tree(pids - termed, signal.SIGTERM)  # e.g. a worker a launcher restarted meanwhile
            termed |= pids
        time.sleep(0.02)
    survivors = [{"pid": pid, "state": _state(pid)} for pid in sorted(pids)]
    stuck = {s["pid"] for s in survivors}
    for p in procs:
        if p.pid not in stuck:  # a survivor would only make this wait time out
            try:
                p.popen.wait(timeout=1.0)
            except subprocess.TimeoutExpired:
                pass
        p.poll()
        p._close_pidfd()
        for f in p.files:
            try:
                f.close()
            except OSError:
                pass
    reap_orphans()
    return {"seconds": time.monotonic() - t0, "killed": bool(killed), "survivors": survivors}


def describe_survivor(pid: int, state: str, who: str | None) -> str:
    """One line about a process that outlived teardown, for the launcher log and the summary."""
    letter = _PS_STATE.get(state)
    shown = "D: uninterruptible sleep, stuck in the kernel (a hung device or file system)" if letter == "D" else \
        f"{letter}: {state}" if letter else state
    return f"pid {pid}{f' ({who})' if who else ''} did not exit after SIGKILL (state {shown}); left running"


def reap_orphans() -> None:
    """Collect exit statuses of re-parented orphans (never other children: their Popen reaps those)."""
    for pid in list(_orphans):
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            done = pid
        if done:
            _orphans.discard(pid)
