"""What the kernel says of an attached rank's threads, read without ptrace or a signal: when they last ran (its
scheduler), and how many bytes they wrote (their lines, wherever they go, and their collectives' traffic): the evidence
of a stall or of progress where the rank's output cannot be read (a terminal, a pipe, /dev/null)."""
from __future__ import annotations

import os
import time
from dataclasses import dataclass

RUNNING = frozenset("RD")  # running or runnable, or in an uninterruptible wait (I/O): active now, whatever ran last


@dataclass(frozen=True)
class ThreadRun:
    """One thread as /proc/PID/task/TID says: its state letter and when it last ran (time.monotonic() seconds; None
    when the kernel does not say: no /proc/PID/task/TID/sched)."""

    tid: int
    comm: str
    state: str
    last_ran: float | None


def _exec_start(path: str) -> float | None:
    """se.exec_start of a /proc/.../sched file, in seconds of the scheduler's clock."""
    try:
        with open(path) as f:
            for ln in f:
                if ln.startswith("se.exec_start"):
                    return float(ln.split(":", 1)[1]) / 1000.0
    except (OSError, ValueError, IndexError):
        pass
    return None


def _cpu(stat: str) -> int | None:
    """The CPU a thread last ran on: field 39 of its /proc/.../stat (the fields after the command counted from 3)."""
    try:
        return int(stat[stat.rfind(")") + 2:].split()[36])
    except (ValueError, IndexError):
        return None


def steal() -> dict[int, float]:
    """cpu -> seconds its hypervisor ran something else since boot (/proc/stat's steal column); {} unreadable."""
    out: dict[int, float] = {}
    try:
        with open("/proc/stat") as f:
            for ln in f:
                if ln.startswith("cpu") and ln[3:4].isdigit():
                    parts = ln.split()
                    out[int(parts[0][3:])] = int(parts[8]) / TICKS
    except (OSError, ValueError, IndexError):
        return {}
    return out


TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def to_monotonic(exec_start: float, cpu: int | None, offset: float, stolen: dict[int, float]) -> float:
    """A thread's se.exec_start in time.monotonic() seconds. The scheduler dates a thread by its CPU's task clock,
    which leaves out the time the hypervisor stole from that CPU (CONFIG_PARAVIRT_TIME_ACCOUNTING): CPUs' task
    clocks drift apart by their steal. `offset` (`clock_offset`) is onto the steal-free clock, so that CPU's steal
    goes back on. (Its steal since then is added too: the date is late by it, never early.)"""
    return exec_start + stolen.get(cpu, 0.0) + offset if cpu is not None else exec_start + offset


def clock_offset(stolen: dict[int, float] | None = None) -> float | None:
    """time.monotonic() minus the scheduler's steal-free clock: this thread runs now, so its own se.exec_start is
    now (to a tick), on its own CPU's task clock, behind by that CPU's steal. The clocks differ (the scheduler's is
    not slewed; under a VM by much), so every reading is converted with it (`to_monotonic`)."""
    stolen = steal() if stolen is None else stolen
    mono = time.monotonic()
    own = _exec_start("/proc/thread-self/sched")
    if own is None:
        return None
    cpu = _own_cpu()
    return mono - own - (stolen.get(cpu, 0.0) if cpu is not None else 0.0)


def _threads(pid: int) -> list[tuple[int, str, str]] | None:
    """(tid, its /proc folder, its name) of every thread of `pid`; None when the process is gone or cannot be read."""
    try:
        tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except (OSError, ValueError):
        return None
    out = []
    for tid in tids:
        base = f"/proc/{pid}/task/{tid}"
        try:
            with open(f"{base}/comm") as f:
                out.append((tid, base, f.read().strip()))
        except OSError:
            continue  # ended between the listing and now
    return out


def _own_cpu() -> int | None:
    try:
        with open("/proc/thread-self/stat") as f:
            return _cpu(f.read())
    except OSError:
        return None


def cpu_offsets(cpus) -> dict[int, float]:
    """cpu -> time.monotonic() minus that CPU's scheduler clock, read by this thread moved onto each CPU in turn (its
    own se.exec_start there is now, to a tick), its affinity put back after: exact whatever the CPUs' steal, with no
    migration between the two readings. A CPU this thread may not run on is left out (`to_monotonic` then)."""
    try:
        mask = os.sched_getaffinity(0)
    except (AttributeError, OSError):
        return {}
    out: dict[int, float] = {}
    try:
        for cpu in sorted(set(cpus) & mask):
            try:
                os.sched_setaffinity(0, {cpu})
            except OSError:
                continue
            mono = time.monotonic()
            own = _exec_start("/proc/thread-self/sched")
            if own is not None and _own_cpu() == cpu:
                out[cpu] = mono - own
    finally:
        try:
            os.sched_setaffinity(0, mask)
        except OSError:
            pass
    return out


def read(pid: int) -> dict[int, ThreadRun] | None:
    """Every thread of `pid` (None: the process is gone or cannot be read). Each date is read on the clock of the CPU
    the thread last ran on (`cpu_offsets`), else by the steal of each CPU (`to_monotonic`)."""
    stolen = steal()
    offset = clock_offset(stolen)
    seen: list[tuple[int, str, str, float | None, int | None]] = []
    for tid, base, comm in _threads(pid) or ():
        try:
            with open(f"{base}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        state = stat[stat.rfind(")") + 2:][:1]  # after the command in parentheses, which may hold spaces
        started = _exec_start(f"{base}/sched") if offset is not None else None
        seen.append((tid, comm, state, started, _cpu(stat)))
    on_cpu = cpu_offsets({cpu for *_, started, cpu in seen if started is not None and cpu is not None})
    out: dict[int, ThreadRun] = {}
    for tid, comm, state, started, cpu in seen:
        if started is None or offset is None:
            out[tid] = ThreadRun(tid, comm, state, None)
        elif cpu is not None and cpu in on_cpu:
            out[tid] = ThreadRun(tid, comm, state, started + on_cpu[cpu])
        else:
            out[tid] = ThreadRun(tid, comm, state, to_monotonic(started, cpu, offset, stolen))
    return out or None


def quiet_since(threads: dict[int, ThreadRun] | None, python_tids: set[int], now: float) -> float | None:
    """The last moment any of the rank's Python threads ran (monotonic), read before anything paused the rank: its
    program can have moved on no later than that. A thread running or in I/O now makes it `now`. None when this
    cannot be told: no reading, no Python thread among the threads read, or a kernel that keeps no last-ran time.
    Threads without Python (gloo's, OpenMP's, a debug server's) wake on their own and say nothing of the program."""
    if not threads:
        return None
    mine = [threads[t] for t in python_tids if t in threads]
    if not mine:
        return None
    if any(t.state in RUNNING for t in mine):
        return now
    if any(t.last_ran is None for t in mine):
        return None
    return min(now, max(t.last_ran for t in mine if t.last_ran is not None))


SERVER_THREADS = frozenset({"pt_workerserver"})  # torch's debug server answering ddptui: its writes are no progress


def written(pid: int) -> dict[int, int] | None:
    """tid -> bytes the thread has written (wchar of /proc/PID/task/TID/io: write(), writev(), send() of any file or
    socket), torch's debug server threads left out; None when the process cannot be read."""
    out: dict[int, int] = {}
    for tid, base, comm in _threads(pid) or ():
        if comm in SERVER_THREADS:
            continue
        try:
            with open(f"{base}/io") as f:
                out[tid] = next(int(ln.split()[1]) for ln in f if ln.startswith("wchar:"))
        except (OSError, ValueError, StopIteration):
            continue
    return out or None


def wrote_since(before: dict[int, int] | None, now: dict[int, int] | None) -> int:
    """Bytes written between two readings, by the threads in both (a thread that ended took its count with it)."""
    if not before or not now:
        return 0
    return sum(max(0, n - before[t]) for t, n in now.items() if t in before)
