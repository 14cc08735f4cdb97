"""The ranks' deaths for the judge: each rank pid's pidfd watched, the slow way for the rest, its OOM counter kept."""
from __future__ import annotations

import psutil

from . import oom
from .deathwatch import Death, DeathWatch


class RankDeaths:
    """The death watch of a run's rank processes, and each one's memory cgroup OOM count from when it was first seen
    (read at the end: whether the kernel's OOM killer sent a SIGKILL nobody else did)."""

    def __init__(self) -> None:
        self.watch = DeathWatch()
        self.seen: dict[int, Death] = {}  # pid -> its death as the watch saw it (where an exit status came from)
        self._oom: dict[int, oom.CgroupCounter] = {}  # rank pid -> its memory cgroup's OOM count

    def count_oom(self, pids: set[int]) -> None:
        for pid in pids:
            if pid not in self._oom:
                self._oom[pid] = oom.CgroupCounter(pid)

    def look(self, watched: set[int], own: set[int]) -> tuple[list[tuple[int, float, int | None]], set[int]]:
        """Watch `watched` (our own rank processes too: the moment they died, not the turn); returns the deaths seen
        since the last look as (pid, wall, returncode), and the pids found gone without a pidfd (not ours)."""
        for pid in watched:
            self.watch.watch(pid)
        deaths = self.watch.deaths()
        for d in deaths:
            self.seen[d.pid] = d
        seen = [(d.pid, d.wall, d.returncode) for d in deaths]
        dead = {pid for pid, _, _ in seen}
        gone = {pid for pid in watched - own - dead  # no pidfd here: the slow way
                if not self.watch.watching(pid) and not psutil.pid_exists(pid)}
        return seen, gone

    def oom_evidence(self, pids: set[int]) -> dict:
        """pid -> oom.KillEvidence: this machine's kernel log and cgroup counters about each pid."""
        return {pid: oom.kill_evidence(pid, self._oom.get(pid)) for pid in pids}

    def close(self) -> None:
        self.watch.close()
