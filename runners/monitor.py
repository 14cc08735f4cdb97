"""Per-rank progress bookkeeping and the decisions made from it: stalled, slow, crashed, completed."""
from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass, field

MAX_POINTS = 2000  # loss points kept per rank (older ones thinned, first and last always kept)
POINTS_PER_EVENT = 500  # loss points one Progress event carries at most
QUIET = 1.0  # seconds without progress that make a rank part of a stall another rank triggered


@dataclass
class RankTrack:
    rank: int
    started: float  # monotonic
    status: str = "starting"
    step: int | None = None
    loss: float | None = None
    first_loss: float | None = None
    losses: list = field(default_factory=list)  # (step or index, loss)
    summary_loss: dict | None = None  # the workload's own "loss: A -> B over N steps"
    last_progress: float = 0.0  # monotonic
    last_progress_wall: float = 0.0
    last_step_at: float | None = None
    intervals: deque = field(default_factory=lambda: deque(maxlen=64))
    pid: int | None = None
    host: str = ""
    returncode: int | None = None
    signal: str | None = None
    exit_wall: float | None = None
    tail: deque = field(default_factory=lambda: deque(maxlen=40))
    err_tail: deque = field(default_factory=lambda: deque(maxlen=80))
    digests: list | None = None
    verdict: dict | None = None
    exc: dict | None = None
    first_failure_wall: float | None = None
    stalled: bool = False
    outcome: str = ""  # why it ended, in words
    steps_total: int | None = None
    new_losses: list = field(default_factory=list)  # (step, loss) since the last Progress event
    reports_losses: bool = False  # the rank reports its losses itself (ddptui_report)
    _drawn_to: int | None = None  # the last parsed point's step when the first report arrived

    def take_new_losses(self) -> tuple:
        """The loss points seen since the last call, evenly thinned to POINTS_PER_EVENT (the last one kept)."""
        pts, self.new_losses = self.new_losses, []
        if len(pts) > POINTS_PER_EVENT:
            k = (len(pts) - 1) / (POINTS_PER_EVENT - 1)
            pts = [pts[round(i * k)] for i in range(POINTS_PER_EVENT)]
        return tuple(pts)

    def saw_output(self, mono: float, wall: float) -> None:
        self.last_progress, self.last_progress_wall = mono, wall

    def saw_step(self, step: int | None, loss: float | None, mono: float, wall: float, reported: bool = False) -> bool:
        """Record a step/loss (`reported`: from the rank's own report, not a parsed log line); True if it is news."""
        news = False
        if step is not None and (self.step is None or step > self.step):
            if self.last_step_at is not None and self.step is not None and mono > self.last_step_at:
                # steps read in one chunk share a read time: only gaps between reads measure step time
                self.intervals.append((mono - self.last_step_at) / max(1, step - self.step))
            self.step, self.last_step_at, news = step, mono, True
        if loss is not None and self._curve_takes(step, reported):
            self.loss, news = loss, True
            if self.first_loss is None:
                self.first_loss = loss
            point = (step if step is not None else self.step if self.step is not None else len(self.losses), loss)
            self.losses.append(point)
            self.new_losses.append(point)
            if len(self.losses) > MAX_POINTS:
                self.losses = self.losses[:1] + self.losses[1:-1:2] + self.losses[-1:]
        if news:
            self.saw_output(mono, wall)
        return news

    def _curve_takes(self, step: int | None, reported: bool) -> bool:
        """One loss curve per rank, one point per step. A rank that reports its losses owns the curve from its
        first report on (a script may also print them: those parsed lines no longer add points), and reported
        points for steps the parsed lines already drew are skipped once, where the two sources meet."""
        if not reported:
            return not self.reports_losses
        if not self.reports_losses:
            self.reports_losses = True
            self._drawn_to = self.losses[-1][0] if self.losses else None
        if self._drawn_to is not None and step is not None:
            if step <= self._drawn_to:
                return False
            self._drawn_to = None  # past the meeting point: the rank's own numbering rules from here on
        return True

    @property
    def alive(self) -> bool:
        return self.returncode is None and self.status not in ("exited", "failed", "killed")

    @property
    def completed(self) -> bool:
        """The workload finished its work (its own verdict arrived), whatever the exit said afterwards."""
        if self.verdict is not None:
            return True
        reached = self.steps_total is None or (self.step or 0) >= self.steps_total
        return self.digests is not None and self.exc is None and reached


def median_interval(tracks) -> float | None:
    vals = [v for t in tracks for v in t.intervals]
    return statistics.median(vals) if len(vals) >= 3 else None


def stall_threshold(profile, tracks) -> float:
    """Seconds without progress that count as a stall, learned from step times unless the profile fixes it."""
    if profile.stall_after != "auto":
        return float(profile.stall_after)
    med = median_interval(tracks)
    return 30.0 if med is None else max(10.0, 20.0 * med)


def find_stall(profile, tracks, now: float) -> tuple[list[int], list[int], float] | None:
    """(stalled ranks, still progressing ranks, threshold) when some live rank exceeded the threshold."""
    live = [t for t in tracks if t.alive and not t.completed]  # a finished rank may take seconds to exit
    if not live:
        return None
    base = stall_threshold(profile, tracks)
    over = []
    for t in live:
        limit = base if t.step is not None else max(base, profile.startup_grace)
        if now - t.last_progress > limit:
            over.append(t)
    if not over:
        return None
    stalled = sorted({t.rank for t in over} | {t.rank for t in live if now - t.last_progress > QUIET})
    progressing = sorted(t.rank for t in live if t.rank not in stalled)
    return stalled, progressing, base


def find_slow(tracks) -> list[int]:
    """Ranks progressing but far behind the others (a straggler in a workload not in lock-step)."""
    live = [t for t in tracks if t.alive and t.step is not None]
    if len(live) < 2:
        return []
    lead = max(t.step for t in live)
    return sorted(t.rank for t in live if lead - t.step > max(5, 0.25 * lead))


def slowed_down(tracks, baseline: float | None) -> float | None:
    """How many times slower the recent steps are than the early baseline (None when not notably)."""
    if not baseline:
        return None
    # three slow steps in a row on every rank still training: one hiccup of a loaded machine is not a slow-down
    recent = [statistics.median(list(t.intervals)[-3:]) for t in tracks
              if t.alive and not t.completed and len(t.intervals) >= 3]
    if not recent:
        return None
    r = statistics.median(recent) / baseline
    return r if r >= 4.0 else None
