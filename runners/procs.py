"""Starting processes in their own sessions and tearing whole process trees down: TERM, deadline, KILL."""
from __future__ import annotations

import ctypes
import os
import select
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from .plan import ProcSpec

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


def become_subreaper() -> bool:
    """Orphaned grandchildren (ranks of a launcher that died) are re-parented to us, so we can kill them."""
    return _prctl(_PR_SET_CHILD_SUBREAPER, 1)


def _child_setup() -> None:
    # If ddptui dies hard, its direct children (launchers, ranks) get SIGTERM instead of training on.
    _prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def signal_name(returncode: int | None) -> str | None:
    if returncode is None or returncode >= 0:
        return None
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return f"signal {-returncode}"


@dataclass
class Proc:
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


def sleep_until_exit(procs: list[Proc], timeout: float, also: int | None = None) -> None:
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


def spawn(spec: ProcSpec) -> Proc:
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
    return Proc(spec, popen, time.time(), files=[out, err], pidfd=_pidfd(popen.pid))


def _alive(pid: int) -> bool:
    try:
        p = psutil.Process(pid)
        return p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _signal_tree(pids: set[int], sig: int) -> None:
    for pid in pids:
        try:
            os.killpg(os.getpgid(pid), sig)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def tree_pids(procs: list[Proc], extra: set[int] = frozenset()) -> set[int]:
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


def _belongs_to_run(proc: psutil.Process, procs: list[Proc]) -> bool:
    try:
        env = proc.environ()
    except psutil.Error:
        return False
    return env.get("DDPTUI_PID") == str(os.getpid())


def teardown(procs: list[Proc], extra: set[int] = frozenset(), deadline: float = 5.0) -> dict[str, float]:
    """SIGTERM to every process group of the run, wait up to `deadline`, SIGKILL what is left, reap."""
    t0 = time.monotonic()
    pids = tree_pids(procs, extra)
    _signal_tree(pids, signal.SIGTERM)
    killed = False
    while True:
        for p in procs:
            p.poll()
        pids = {pid for pid in pids | tree_pids(procs) if _alive(pid)}
        if not pids:
            break
        if time.monotonic() - t0 > deadline:
            _signal_tree(pids, signal.SIGKILL)
            killed = True
            deadline += 2.0  # give KILL a moment, then give up waiting
            if time.monotonic() - t0 > deadline + 2.0:
                break
        time.sleep(0.02)
    for p in procs:
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
    return {"seconds": time.monotonic() - t0, "killed": float(killed)}


def reap_orphans() -> None:
    """Collect exit statuses of re-parented orphans (never other children: their Popen reaps those)."""
    for pid in list(_orphans):
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            done = pid
        if done:
            _orphans.discard(pid)
