"""CPU seconds and RSS of the ranks' processes (psutil), and this host's load: the evidence of the stall rule's busy
test and of the front end's CPU/RSS columns."""
from __future__ import annotations

import os
import time
from collections.abc import Callable

import psutil

from .locality import on_this_host

_PS_CACHE: dict[int, psutil.Process] = {}


def sample(targets: dict[int, int | None], tracks, starter_pid: Callable[[int], int | None]
           ) -> tuple[dict[int, tuple[int, float, float, int]], dict[int, str]]:
    """(samples: rank -> (pid, mono, CPU seconds, RSS bytes), no_cpu: rank -> why it has none) for the judge's
    `resources`, of `targets` (rank -> its pid, None: not known yet).

    A rank whose process is not known yet (a launcher still starting it) is judged by the CPU of its launcher's whole
    process tree (`starter_pid`): the launcher waits while what it started imports torch (torchrun's ranks,
    torch_xla's worker). A rank on another node is not sampled: its pid is another machine's."""
    seen: dict[int, tuple[float, float, int] | None] = {}
    samples, no_cpu = {}, {}
    for rank, pid in targets.items():
        t = tracks[rank]
        if not on_this_host(t.host):
            no_cpu[rank] = f"runs on {t.node or t.host}"
            continue
        starting = not pid
        pid = pid or starter_pid(rank)
        if not pid:
            continue
        if pid not in seen:
            try:
                pr = _psproc(pid)
                with pr.oneshot():
                    times = pr.cpu_times()
                    used = _tree_cpu(pr, times) if starting else times.user + times.system
                    seen[pid] = (time.monotonic(), used, pr.memory_info().rss)
            except psutil.Error:
                seen[pid] = None
        got = seen[pid]
        if got is not None:
            samples[rank] = (pid, *got)
    return samples, no_cpu


def host_load() -> tuple[float, int | None] | None:
    """This host's 1-minute load average and CPUs: a loaded machine makes every rank slow, whatever its model."""
    try:
        return os.getloadavg()[0], os.cpu_count()
    except OSError:  # no load average on this system
        return None


def busy_floor() -> tuple[int, float]:
    """The cores ddptui may use and the 1-minute load average: the busy test's floor."""
    return len(os.sched_getaffinity(0)), os.getloadavg()[0]


def _tree_cpu(pr: psutil.Process, times) -> float:
    """CPU seconds of a process and everything below it, the ended ones too (each process's reaped children's times
    count in its own `children_*`): a launcher's, while the ranks it starts have not said their pids."""
    total = times.user + times.system + times.children_user + times.children_system
    try:
        kids = pr.children(recursive=True)
    except psutil.Error:
        return total
    for kid in kids:
        try:
            t = kid.cpu_times()
            total += t.user + t.system + t.children_user + t.children_system
        except psutil.Error:
            continue
    return total


def _psproc(pid: int) -> psutil.Process:
    """psutil needs the same Process object between calls for cpu_percent to mean anything."""
    pr = _PS_CACHE.get(pid)
    if pr is None:
        pr = _PS_CACHE[pid] = psutil.Process(pid)
    return pr
