"""The UI-side run model: folds engine events into bounded per-rank state that widgets read on a timer."""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Iterable

from ddptui.runners import events as ev

LINES_PER_RANK = 2000
TIMELINE_LINES = 5000
LOSS_POINTS = 4000
REPORT_PREFIX = "@ddptui"

# (wall, stream, text); the timeline adds the rank: (wall, rank, stream, text)
Line = tuple[float, str, str]
TimelineLine = tuple[float, "int | None", str, str]

@dataclass
class RankView:
    rank: int
    status: str = "starting"
    detail: str = ""
    pid: int | None = None
    host: str = ""
    step: int | None = None
    loss: float | None = None
    losses: deque = field(default_factory=lambda: deque(maxlen=LOSS_POINTS))  # (step, loss)
    cpu: float | None = None
    rss: int | None = None
    lines: deque = field(default_factory=lambda: deque(maxlen=LINES_PER_RANK))
    seq: int = 0  # lines ever appended: widgets compare it with what they drew
    version: int = 0  # bumps on any change of this rank
    returncode: int | None = None
    signal: str | None = None
    last_progress: float | None = None

    def badge(self) -> str:
        """The status word shown in the pane title: running, stalled, exited ok, failed (exit 1 / SIGSEGV)."""
        s = self.status
        if s == "exited":
            return "exited ok" if not self.returncode else f"failed (exit {self.returncode})"
        if s == "failed":
            if self.detail:
                return f"failed ({self.detail})"
            if self.signal:
                return f"failed ({self.signal})"
            if self.returncode is not None:
                return f"failed (exit {self.returncode})"
        return s


class RunModel:
    """Everything the dashboard shows about one run; fed by ``apply(batch)`` on the UI thread only."""

    def __init__(self) -> None:
        self.ranks: dict[int, RankView] = {}
        self.profile = ""
        self.runner = ""
        self.run_dir = ""
        self.world_size = 0
        self.steps: int | None = None
        self.start_wall: float | None = None
        self.last_wall: float | None = None
        self.launcher: deque = deque(maxlen=LINES_PER_RANK)
        self.timeline: deque = deque(maxlen=TIMELINE_LINES)
        self.timeline_seq = 0
        self.processes: dict[str, dict] = {}
        self.hints: list[ev.HintRaised] = []
        self.stall: ev.StallDetected | None = None  # the stall now: None again once StallCleared says it is over
        self.stall_hang: ev.HangVerdict | None = None  # the current stall's own verdict, once it came
        self.hang: ev.HangVerdict | None = None  # the run's hang verdict, as the engine keeps it: stalls only
        self.slow: ev.HangVerdict | None = None  # the latest stack sample of a run that slowed down
        self.stacks: ev.StacksCollected | None = None
        self.crash: ev.CrashVerdict | None = None
        self.replica: ev.ReplicaVerdict | None = None
        self.finished: ev.RunFinished | None = None
        self.version = 0  # bumps on any change outside the per-rank panes (banner, tabs)
        self.loss_version = 0
        self.events_seen = 0
        self.lines_seen = 0

    # -- reading ---------------------------------------------------------------------------------
    def rank(self, r: int) -> RankView:
        rv = self.ranks.get(r)
        if rv is None:
            rv = self.ranks[r] = RankView(r)
            self.version += 1
        return rv

    def rank_ids(self) -> list[int]:
        ids = set(self.ranks) | set(range(self.world_size))
        return sorted(ids)

    def rel(self, wall: float) -> float:
        """Seconds since the run started: what timestamps show (independent of the time zone)."""
        return wall - self.start_wall if self.start_wall is not None else 0.0

    def elapsed(self) -> float:
        if self.start_wall is None or self.last_wall is None:
            return 0.0
        return self.last_wall - self.start_wall

    def stacks_verdict(self) -> ev.HangVerdict | None:
        """The verdict read from the latest stacks (a stall's or a slow-down sample's), for the Stacks tab."""
        if self.stacks is not None and self.slow is not None and self.slow.path == self.stacks.path:
            return self.slow
        return self.hang

    @property
    def live(self) -> bool:
        return self.start_wall is not None and self.finished is None

    # -- writing ---------------------------------------------------------------------------------
    def apply(self, batch: Iterable[ev.Event]) -> None:
        """Fold one batch; log lines are ordered by read time so the merged timeline stays sorted."""
        batch = list(batch)
        logs = [e for e in batch if isinstance(e, ev.LogLines)]
        if len(logs) > 1:
            logs.sort(key=lambda e: e.wall)
        for e in batch:
            if not isinstance(e, ev.LogLines):
                self._apply_one(e)
        for e in logs:
            self._apply_lines(e)
        self.events_seen += len(batch)

    def _apply_lines(self, e: ev.LogLines) -> None:
        lines = [t for t in e.lines if not t.startswith(REPORT_PREFIX)]
        if not lines:
            return
        self._touch(e.wall)
        if e.rank is None:
            target = self.launcher
        else:
            rv = self.rank(e.rank)
            target = rv.lines
            rv.seq += len(lines)
            rv.version += 1
        w, s, r = e.wall, e.stream, e.rank
        target.extend([(w, s, t) for t in lines])
        self.timeline.extend([(w, r, s, t) for t in lines])
        self.timeline_seq += len(lines)
        self.lines_seen += len(lines)

    def _touch(self, wall: float) -> None:
        if self.last_wall is None or wall > self.last_wall:
            self.last_wall = wall

    def _apply_one(self, e: ev.Event) -> None:  # noqa: C901 - one branch per event type
        wall = getattr(e, "wall", None)
        if wall is not None:
            self._touch(wall)
        if isinstance(e, ev.RunStarted):
            self.run_dir, self.profile, self.runner = e.run_dir, e.profile, e.runner
            self.world_size, self.steps, self.start_wall = e.world_size, e.steps, e.wall
            for r in range(e.world_size):
                self.rank(r)
        elif isinstance(e, ev.ProcessStarted):
            self.processes[e.name] = {"pid": e.pid, "ranks": e.ranks, "returncode": None, "signal": None}
            if len(e.ranks) == 1:
                rv = self.rank(e.ranks[0])
                rv.pid = rv.pid or e.pid
                rv.version += 1
        elif isinstance(e, ev.RankHello):
            rv = self.rank(e.rank)
            rv.pid, rv.host = e.pid, e.host
            rv.version += 1
        elif isinstance(e, ev.Progress):
            rv = self.rank(e.rank)
            if e.step is not None and (rv.step is None or e.step >= rv.step):
                rv.step = e.step
            if e.losses:  # every point since the rank's previous event
                rv.losses.extend(tuple(p) for p in e.losses)
                rv.loss = e.loss if e.loss is not None else e.losses[-1][1]
                self.loss_version += 1
            elif e.loss is not None:
                rv.loss = e.loss
                rv.losses.append((e.step if e.step is not None else len(rv.losses), e.loss))
                self.loss_version += 1
            rv.last_progress = e.wall
            rv.version += 1
        elif isinstance(e, ev.RankState):
            rv = self.rank(e.rank)
            rv.status, rv.detail = e.status, e.detail
            rv.version += 1
            self.version += 1
        elif isinstance(e, ev.ProcessExited):
            p = self.processes.setdefault(e.name, {"pid": None, "ranks": e.ranks})
            p["returncode"], p["signal"] = e.returncode, e.signal
            if len(e.ranks) == 1:  # a launcher's exit code says nothing about each of its ranks
                rv = self.rank(e.ranks[0])
                rv.returncode, rv.signal = e.returncode, e.signal
                rv.version += 1
            self.version += 1
        elif isinstance(e, ev.Resources):
            for r, c in e.cpu.items():
                rv = self.rank(r)
                rv.cpu = c
                rv.version += 1
            for r, m in e.rss.items():
                if not m:  # a process already gone reads as 0: keep its last real size
                    continue
                rv = self.rank(r)
                rv.rss = m
                rv.version += 1
        elif isinstance(e, ev.HintRaised):
            self.hints.append(e)
            self.version += 1
        elif isinstance(e, ev.StallDetected):
            self.stall, self.stall_hang = e, None
            self.version += 1
        elif isinstance(e, ev.StallCleared):
            self.stall = self.stall_hang = None  # the banner drops it; its verdict stays in self.hang (Stacks tab)
            self.version += 1
        elif isinstance(e, ev.StacksCollected):
            self.stacks = e
            self.version += 1
        elif isinstance(e, ev.HangVerdict):
            if e.reason == "slow":  # a sample of a moving run never replaces a stall's verdict (nor does the engine)
                self.slow = e
            else:
                self.hang = e
                if self.stall is not None:
                    self.stall_hang = e
            self.version += 1
        elif isinstance(e, ev.CrashVerdict):
            self.crash = e
            self.version += 1
        elif isinstance(e, ev.ReplicaVerdict):
            self.replica = e
            self.version += 1
        elif isinstance(e, ev.RunFinished):
            self.finished = e
            self.version += 1


def human_bytes(n: int | None) -> str:
    if n is None:
        return "-"
    for unit in ("B", "K", "M", "G"):
        if n < 1024 or unit == "G":
            return f"{n:.0f}{unit}" if unit == "B" else f"{n:.1f}{unit}"
        n /= 1024
    return f"{n:.1f}G"


def grid_columns(n: int) -> int:
    """Columns of the rank grid: readable panes from 1 to 16+ ranks."""
    if n <= 1:
        return 1
    if n <= 4:
        return 2
    if n <= 9:
        return 3
    if n <= 16:
        return 4
    return 6 if n > 24 else 5
