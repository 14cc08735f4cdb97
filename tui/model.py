"""The UI-side run model: folds engine events into bounded per-rank state and says what changed, for the screens to redraw."""
from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ..runners import events as ev
from . import rate
from .history import Segmented
from .retention import LINE_BUDGET, LOSS_BUDGET, STEP_BUDGET, STEP_POINTS, WHOLE_BUCKETS, WHOLE_BUDGET, kept_per_rank

LINES_PER_RANK = 2000
TIMELINE_LINES = 5000
LOSS_POINTS = 4000

# (wall, stream, text); the timeline adds the rank: (wall, rank, stream, text)
Line = tuple[float, str, str]
TimelineLine = tuple[float, "int | None", str, str]

@dataclass
class Changes:
    """What folding events changed since the screens were last told: they redraw only that."""

    ranks: set = field(default_factory=set)  # ranks whose pane changed (state, progress, resources, lines)
    lines: bool = False  # new log lines (the timeline)
    loss: bool = False  # new loss points (the chart)
    run: bool = False  # anything outside the panes: head, banner, tabs, verdicts, hints, stacks, new ranks
    coll: set = field(default_factory=set)  # ranks whose Collectives rows changed (numbers, or lagging or not)

    def __bool__(self) -> bool:
        return bool(self.ranks) or self.lines or self.loss or self.run or bool(self.coll)

    def merge(self, other: Changes) -> Changes:
        self.ranks |= other.ranks
        self.lines = self.lines or other.lines
        self.loss = self.loss or other.loss
        self.run = self.run or other.run
        self.coll |= other.coll
        return self

    def copy(self) -> Changes:
        return Changes(set(self.ranks), self.lines, self.loss, self.run, set(self.coll))


@dataclass
class RankView:
    rank: int
    status: str = "starting"
    detail: str = ""
    pid: int | None = None
    host: str = ""
    node: str = ""  # as the rank's launcher names it; "" until its hello (and in records older than nodes)
    step: int | None = None
    loss: float | None = None
    losses: deque = field(default_factory=lambda: deque(maxlen=LOSS_POINTS))  # (step, loss)
    cpu: float | None = None
    rss: int | None = None
    lines: deque = field(default_factory=lambda: deque(maxlen=LINES_PER_RANK))
    seq: int = 0  # lines ever appended: a tail redraws when it moves
    returncode: int | None = None
    signal: str | None = None
    last_progress: float | None = None
    step_time: float | None = None  # seconds per step, the engine's (Progress.step_time); None until known
    step_wall: float | None = None  # wall time its newest step was read (the pace decays once it is late)
    samples: int | None = None  # samples in its newest optimizer step (Progress.samples); None when unknown
    phase: str = ""  # what a rank not yet training is doing, in words (spawning, importing torch, rendezvous...)
    phase_since: float | None = None  # wall time it entered `phase`
    # the engine's words when it named the rank slow (None: never), kept once its status moves on (exited...)
    slowed: str | None = None
    stalled: str | None = None  # the same for a stall
    step_times: deque = field(default_factory=lambda: deque(maxlen=STEP_POINTS))  # (step, seconds per step)
    # the losses and step times by attempt, the recent window (losses / step_times) and the whole run thinned
    loss_series: Segmented = field(default=None)  # type: ignore[assignment]  # made in __post_init__
    step_series: Segmented = field(default=None)  # type: ignore[assignment]
    whole_cap: int = WHOLE_BUCKETS  # buckets of each whole-run history (tui/retention.py)

    def __post_init__(self) -> None:
        if self.loss_series is None:
            self.loss_series = Segmented(self.losses, self.whole_cap)
        if self.step_series is None:
            self.step_series = Segmented(self.step_times, self.whole_cap)

    def past(self, short: bool = False) -> str:
        """What the rank went through that its status no longer says: "was slow (steps take 0.50 s, ...)", "was
        stalled (...)"; short: without the numbers (a pane's title). "" when its status says it all."""
        said = []
        if self.slowed is not None and self.status != "slow":
            said.append("was slow" + ("" if short or not self.slowed else f" ({self.slowed})"))
        if self.stalled is not None and self.status != "stalled" and "stall" not in self.detail:
            said.append("was stalled" + ("" if short or not self.stalled else f" ({self.stalled})"))
        return ", ".join(said)

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
        self.slow_over = False  # a slow rank is back at pace since that sample (the banner goes; the verdict stays)
        self.stacks: ev.StacksCollected | None = None
        self.crash: ev.CrashVerdict | None = None
        self.replica: ev.ReplicaVerdict | None = None
        self.diverged: ev.ReplicaDiverged | None = None  # the live replica check's first divergence
        self.finished: ev.RunFinished | None = None
        self.job: ev.JobState | None = None  # the batch job's latest state (Slurm), None when the run is no job
        self.lost: list[ev.NodeLost] = []  # nodes that stopped taking part, in the order they were lost
        # the run's attempts (each restart of its launcher), from AttemptStarted/AttemptEnded: {"attempt", "why",
        # "began", "ended" (None while it runs), "status", "verdict", "stacks"}; [] for a run that cannot restart
        self.attempts: list[dict] = []
        # rank -> pg name -> its Flight Recorder numbers, merged from CollectiveProgress (each names changed ranks)
        self.collectives: dict[int, dict[str, dict]] = {}
        self.laggards: tuple[int, ...] = ()  # the engine's latest word on who lags behind in collectives
        self.coll_mismatch: dict = {}  # the engine's latest word on ranks pending in different calls (its finding)
        self.load: float | None = None  # the engine host's 1-minute load average, and its CPUs (Resources)
        self.cpus: int | None = None
        self._read_times = rate.ReadTimes()  # step times of a record whose Progress carries none (RankView.step_time)
        self.changes = Changes()  # since take_changes(); every write below says what it touched
        self.loss_version = 0  # bumps with every new loss point: the chart redraws when it moves
        self.step_version = 0  # the same for step times (the chart's straggler view)
        self.events_seen = 0
        self.lines_seen = 0
        # per-rank history kept: the defaults, shared out of a budget once the world is large (tui/retention.py)
        self.lines_kept, self.loss_kept = LINES_PER_RANK, LOSS_POINTS
        self.whole_kept, self.steps_kept = WHOLE_BUCKETS, STEP_POINTS
        self.attempt = 0  # the attempt now (the chart draws each as its own segment)
        self.resumed_at: dict[int, int] = {}  # attempt -> the lowest first step a rank reported in it

    def _attempt_started(self, e: ev.AttemptStarted) -> None:
        """An attempt began: after a restart the ranks start over (their steps, pace and stall are the new attempt's;
        the ended attempt's verdicts are in `attempts`)."""
        self.attempts.append({"attempt": e.attempt, "why": e.why, "began": e.wall, "ended": None, "status": "running",
                              "verdict": "", "stacks": ""})
        if e.attempt > 0:
            for rv in self.ranks.values():
                rv.step = rv.step_time = rv.step_wall = rv.stalled = rv.slowed = None
                rv.pid = None
                self.changes.ranks.add(rv.rank)
            self.stall = self.stall_hang = self.hang = self.slow = self.crash = None
            self.slow_over = False
            self._read_times = rate.ReadTimes()  # an older record's step times start over too
        if e.attempt != self.attempt:  # the chart draws the new attempt as its own segment (tui/history.py)
            self.attempt = e.attempt
            self.loss_version += 1
            self.step_version += 1
            self.changes.loss = True
        self.changes.run = True

    # -- reading ---------------------------------------------------------------------------------
    def rank(self, r: int) -> RankView:
        rv = self.ranks.get(r)
        if rv is None:
            rv = self.ranks[r] = RankView(r, losses=deque(maxlen=self.loss_kept), lines=deque(maxlen=self.lines_kept),
                                          step_times=deque(maxlen=self.steps_kept), whole_cap=self.whole_kept)
            self.changes.run = True
        return rv

    def rank_ids(self) -> list[int]:
        ids = set(self.ranks) | set(range(self.world_size))
        return sorted(ids)

    def where(self, r: int) -> str:
        """The node a rank runs on as shown: its launcher's name for it, else its host; "" before its hello."""
        rv = self.ranks.get(r)
        return (rv.node or rv.host) if rv is not None else ""

    def nodes(self) -> dict[str, list[int]]:
        """Node -> its ranks, nodes in the order of their lowest rank; ranks not placed yet under ""."""
        out: dict[str, list[int]] = {}
        for r in self.rank_ids():
            out.setdefault(self.where(r), []).append(r)
        return out

    def grouped_rank_ids(self) -> list[int]:
        """The grid's order: node by node once ranks on two nodes said hello (ranks not placed yet last), else by
        rank (one machine: panes never move while the hellos arrive)."""
        groups = self.nodes()
        unplaced = groups.pop("", [])
        if len(groups) < 2:
            return self.rank_ids()
        return [r for rs in groups.values() for r in rs] + unplaced

    def columns(self) -> int:
        """Columns of the rank grid: by node (node_grid_columns) once every rank is placed on 2+ nodes."""
        groups = self.nodes()
        if "" in groups or len(groups) < 2:
            return grid_columns(len(self.rank_ids()))
        return node_grid_columns([len(rs) for rs in groups.values()])

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

    def collective_finding(self) -> tuple[dict, str]:
        """(finding, fix) the Collectives tab leads with: the current stall's Flight Recorder finding, as the banner
        says it (HangVerdict.collective and .fix), else the engine's live word on ranks pending in different calls
        (CollectiveProgress.mismatch); ({}, "") when there is neither."""
        hv = self.stall_hang if self.stall is not None else None
        c = hv.collective if hv is not None else {}
        if hv is not None and c and c.get("kind") not in (None, "none") and not c.get("completed"):
            return c, hv.fix
        m = self.coll_mismatch
        return (m, str(m.get("fix") or "")) if m else ({}, "")

    def _now(self) -> float | None:
        """The newest event's wall time while the run lives (the engine sends its samples every second): what a pace
        decays by once no step comes. None once it ended, or in a replay of an ended run."""
        return self.last_wall if self.live else None

    def pace(self) -> rate.Pace | None:
        """The run's pace: steps/s and time left of the rank that finishes last (tui/rate.py)."""
        return rate.run_pace(self.ranks.values(), self.steps, self._now())

    def samples_rate(self) -> float | None:
        """Samples a second over the live ranks, where their models' inputs told their batch (tui/rate.py)."""
        return rate.run_samples_rate(self.ranks.values(), self._now())

    def no_step_for(self) -> float | None:
        """Seconds since the run's newest step, once that is late by the run's own pace; None while steps come."""
        return rate.no_step_for(self.ranks.values(), self.steps, self._now())

    def phase_text(self, rv: RankView) -> str:
        """'rendezvous 12s': the rank's start-up phase and its seconds in it, as of the newest event; "" if none."""
        return rate.phase_text(rv.phase, rv.phase_since, self.last_wall)

    def _phase(self, rv: RankView, phase: str, wall: float | None) -> None:
        if rv.phase != phase:
            rv.phase, rv.phase_since = phase, wall if phase else None
            self.changes.ranks.add(rv.rank)

    @property
    def live(self) -> bool:
        return self.start_wall is not None and self.finished is None

    # -- writing ---------------------------------------------------------------------------------
    def take_changes(self) -> Changes:
        """What changed since the last call, and start over."""
        c, self.changes = self.changes, Changes()
        return c

    def restore(self, other: RunModel) -> None:
        """Become `other` in place (a replay stepped back: tui/rewind.py folded the record up to that event): the
        screens keep this object. Everything counts as changed; the chart's versions move on, never back."""
        loss, step = self.loss_version, self.step_version
        self.__dict__.update(other.__dict__)
        self.loss_version = max(loss, other.loss_version) + 1
        self.step_version = max(step, other.step_version) + 1
        self.changes = Changes(set(self.ranks), True, True, True, set(self.collectives))

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
        # Shown as the engine sent them: it already took its reports out (runners/evidence/parse.py), as it did before
        # recording them, so a replayed record holds none either.
        lines = e.lines
        if not lines:
            return
        self._touch(e.wall)
        self.changes.lines = True
        if e.rank is None:
            target = self.launcher
        else:
            rv = self.rank(e.rank)
            target = rv.lines
            rv.seq += len(lines)
            self.changes.ranks.add(e.rank)
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
            self.lines_kept = kept_per_rank(e.world_size, LINE_BUDGET, LINES_PER_RANK)
            self.loss_kept = kept_per_rank(e.world_size, LOSS_BUDGET, LOSS_POINTS)
            self.whole_kept = kept_per_rank(e.world_size, WHOLE_BUDGET, WHOLE_BUCKETS, least=16)
            self.steps_kept = kept_per_rank(e.world_size, STEP_BUDGET, STEP_POINTS, least=16)
            self.changes.run = True
            for r in range(e.world_size):
                self.rank(r)
        elif isinstance(e, ev.ProcessStarted):
            self.processes[e.name] = {"pid": e.pid, "ranks": e.ranks, "returncode": None, "signal": None}
            for r in e.ranks:  # its ranks are on their way until each says hello
                rv = self.rank(r)
                if rv.step is None and not rv.phase and not (rv.host or rv.node) and rv.status == "starting":
                    self._phase(rv, "spawning", e.wall)
            if len(e.ranks) == 1:
                rv = self.rank(e.ranks[0])
                rv.pid = rv.pid or e.pid
                self.changes.ranks.add(rv.rank)
        elif isinstance(e, ev.RankRenumbered):
            self._renumber(e.was, e.rank)
        elif isinstance(e, ev.RankHello):
            rv = self.rank(e.rank)
            placed = rv.node or rv.host
            rv.pid, rv.host, rv.node = e.pid, e.host, e.node
            self.changes.ranks.add(rv.rank)
            if rv.step is None and rv.phase in ("", "spawning"):  # its interpreter runs: imports come next
                self._phase(rv, "starting python", e.wall)
            if (rv.node or rv.host) != placed:  # the grid groups ranks by node
                self.changes.run = True
        elif isinstance(e, ev.RankPhase):
            rv = self.rank(e.rank)
            if rv.step is None and not ev.rank_ended(rv.status):
                self._phase(rv, e.phase, e.wall)
        elif isinstance(e, ev.Progress):
            rv = self.rank(e.rank)
            stepped = False
            if e.step is not None and (rv.step is None or e.step >= rv.step):
                if rv.step is None and self.attempt:  # the rank's first step in this attempt
                    first = min(e.step, e.losses[0][0]) if e.losses else e.step
                    self.resumed_at[self.attempt] = min(first, self.resumed_at.get(self.attempt, first))
                if e.step != rv.step:
                    rv.step_wall = e.wall
                    stepped = True
                rv.step = e.step
            if e.step_time is not False:  # the engine's figure (runners/evidence/steptime.py)
                rv.step_time = e.step_time
            else:  # an older record: its read times, by the engine's rule
                clock = self._read_times.add(e.rank, e.wall, e.step)
                rv.step_time = clock.step_time() if clock is not None else None
            if stepped and rv.step_time:  # the straggler chart: each rank's step time as its steps came
                rv.step_series.add(((rv.step, rv.step_time),), self.attempt)
                self.step_version += 1
                self.changes.loss = True
            if e.samples:
                rv.samples = e.samples
            self._phase(rv, "", None)
            if e.losses:  # every point since the rank's previous event
                rv.loss_series.add([tuple(p) for p in e.losses], self.attempt)
                rv.loss = e.loss if e.loss is not None else e.losses[-1][1]
                self.loss_version += 1
                self.changes.loss = True
            elif e.loss is not None:
                rv.loss = e.loss
                rv.loss_series.add(((e.step if e.step is not None else rv.loss_series.count, e.loss),), self.attempt)
                self.loss_version += 1
                self.changes.loss = True
            rv.last_progress = e.wall
            self.changes.ranks.add(rv.rank)
        elif isinstance(e, ev.RankState):
            rv = self.rank(e.rank)
            if rv.status == "slow" or e.status == "slow":
                self.slow_over = e.status != "slow"
            rv.status, rv.detail = e.status, e.detail
            if e.status == "slow":
                rv.slowed = e.detail
            elif e.status == "stalled":
                rv.stalled = e.detail
            self.changes.ranks.add(rv.rank)
            if ev.rank_ended(e.status):
                self._phase(rv, "", None)
            self.changes.run = True
        elif isinstance(e, ev.ProcessExited):
            p = self.processes.setdefault(e.name, {"pid": None, "ranks": e.ranks})
            p["returncode"], p["signal"] = e.returncode, e.signal
            if len(e.ranks) == 1:  # a launcher's exit code says nothing about each of its ranks
                rv = self.rank(e.ranks[0])
                rv.returncode, rv.signal = e.returncode, e.signal
                self.changes.ranks.add(rv.rank)
                self._phase(rv, "", None)
            self.changes.run = True
        elif isinstance(e, ev.Resources):
            if e.load is not None and (e.load, e.cpus) != (self.load, self.cpus):
                self.load, self.cpus = e.load, e.cpus
                self.changes.run = True
            for rv in self.ranks.values():  # the seconds a rank has spent in its start-up phase moved on
                if rv.phase:
                    self.changes.ranks.add(rv.rank)
            for r, c in e.cpu.items():
                rv = self.rank(r)
                rv.cpu = c
                self.changes.ranks.add(rv.rank)
            for r, m in e.rss.items():
                if not m:  # a process already gone reads as 0: keep its last real size
                    continue
                rv = self.rank(r)
                rv.rss = m
                self.changes.ranks.add(rv.rank)
        elif isinstance(e, ev.HintRaised):
            self.hints.append(e)
            self.changes.run = True
        elif isinstance(e, ev.StallDetected):
            self.stall, self.stall_hang = e, None
            self.changes.run = True
        elif isinstance(e, ev.StallCleared):
            self.stall = self.stall_hang = None  # the banner drops it; its verdict stays in self.hang (Stacks tab)
            self.changes.run = True
        elif isinstance(e, ev.StacksCollected):
            self.stacks = e
            self.changes.run = True
        elif isinstance(e, ev.HangVerdict):
            if e.reason == "slow":  # a sample of a moving run never replaces a stall's verdict (nor does the engine)
                self.slow, self.slow_over = e, False
            else:
                self.hang = e
                if self.stall is not None:
                    self.stall_hang = e
            self.changes.run = True
        elif isinstance(e, ev.CrashVerdict):
            self.crash = e
            self.changes.run = True
        elif isinstance(e, ev.AttemptStarted):
            self._attempt_started(e)
        elif isinstance(e, ev.AttemptEnded):
            now = next((a for a in self.attempts if a["attempt"] == e.attempt), None)
            if now is None:
                now = {"attempt": e.attempt, "why": "", "began": None}
                self.attempts.append(now)
            now.update(ended=e.wall, status=e.status, verdict=e.verdict, stacks=e.stacks)
            self.changes.run = True
        elif isinstance(e, ev.ReplicaVerdict):
            self.replica = e
            self.changes.run = True
        elif isinstance(e, ev.ReplicaDiverged):
            self.diverged = e
            self.changes.run = True
        elif isinstance(e, ev.JobState):
            self.job = e
            self.changes.run = True
        elif isinstance(e, ev.NodeLost):
            self.lost.append(e)
            self.changes.run = True
        elif isinstance(e, ev.CollectiveProgress):
            for r, groups in e.by_rank.items():
                self.collectives[r] = groups  # a rank's groups come whole; its old dict is not shared with the event
                self.changes.coll.add(r)
            laggards = tuple(e.laggards)
            if laggards != self.laggards:  # rows that turn behind or back
                self.changes.coll.update(set(laggards) ^ set(self.laggards))
                self.laggards = laggards
            if e.mismatch != self.coll_mismatch:  # rows that turn mismatched or back
                self.changes.coll.update(_ranks_of(e.mismatch) | _ranks_of(self.coll_mismatch))
                self.coll_mismatch = e.mismatch
        elif isinstance(e, ev.RunFinished):
            self.finished = e
            self.changes.run = True
            self.loss_version += 1  # the chart's default view becomes the whole run (LossChart.showing_whole)
            self.step_version += 1
            self.changes.loss = True

    def _renumber(self, was: int, rank: int) -> None:
        """The pane the plan numbered `was` is global rank `rank` (its hello said so): what it showed moves there, and
        `was` starts over (a rank of another node, which this ddptui does not see)."""
        rv = self.ranks.pop(was, None)
        if rv is not None:
            rv.rank = rank
            self.ranks[rank] = rv
        keyed_by_rank: tuple[dict[int, Any], ...] = (self._read_times.clocks, self.collectives)
        for held in keyed_by_rank:
            if was in held:
                held[rank] = held.pop(was)
        self.rank(was)
        self.changes.ranks.update((was, rank))
        self.changes.run = True


def _ranks_of(finding: dict) -> set[int]:
    return {int(r) for r in (finding.get("sides") or {})}


def human_bytes(n: float | None) -> str:
    if n is None:
        return "-"
    for unit in ("B", "K", "M", "G"):
        if n < 1024 or unit == "G":
            return f"{n:.0f}{unit}" if unit == "B" else f"{n:.1f}{unit}"
        n /= 1024
    return f"{n:.1f}G"


def node_grid_columns(sizes: list[int]) -> int:
    """Columns of a grid grouped by node (`sizes`: ranks per node): as grid_columns, narrowed to a multiple of the
    ranks per node when every node runs as many and that fits, so each row begins with a node's first rank."""
    n = sum(sizes)
    cols = grid_columns(n)
    if len(sizes) > 1 and len(set(sizes)) == 1:
        per = sizes[0]
        if per <= cols:
            return cols - cols % per
        # a node wider than a row: rows a whole fraction of it, so the next node still starts a row
        for c in range(cols, 0, -1):
            if per % c == 0 and c >= cols // 2:
                return c
    return cols


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
