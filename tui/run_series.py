"""A run record's steps, losses, step times and samples per rank, folded from its events: what compare and export
read (pure)."""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from itertools import compress
from operator import itemgetter

from ..runners import events as ev
from ..runners.edge.record import ProgressColumns, event_columns
from .rate import ReadTimes


@dataclass
class RankSeries:
    """One rank's Progress events in record order, one entry each (the step it reached, when it was read, the
    engine's step time then, the samples of its newest step, the run's attempt), and every loss point it reported."""

    rank: int
    steps: list[int] = field(default_factory=list)
    walls: list[float] = field(default_factory=list)
    step_times: list[float | None] = field(default_factory=list)
    samples: list[int | None] = field(default_factory=list)
    attempts: list[int] = field(default_factory=list)
    # every loss point, in record order: its attempt, step and loss
    loss_attempts: list[int] = field(default_factory=list)
    loss_steps: list[int] = field(default_factory=list)
    loss_values: list[float] = field(default_factory=list)


@dataclass
class RunSeries:
    """What compare and export need of one record."""

    name: str  # the record's folder name
    path: str
    profile: str = ""
    runner: str = ""
    world_size: int = 0
    started: float | None = None  # RunStarted.wall
    ended: float | None = None  # RunFinished.wall
    status: str = "incomplete"  # RunFinished.status; "incomplete" without one
    verdict: str = ""  # the one-line verdict (`verdict_line`)
    attempt: int = 0  # the run's last attempt
    ranks: dict[int, RankSeries] = field(default_factory=dict)
    others: list[ev.Event] = field(default_factory=list)  # every event but Progress, in record order
    problems: list[str] = field(default_factory=list)  # what the record lacked or could not be read


class RunFolder:
    """Folds a record's events into a RunSeries: `event` for any event, `progress` for Progress events as columns
    (the readers' fast path: a long run's record is mostly Progress), then `result`."""

    def __init__(self, name: str, path: str = "") -> None:
        self.run = RunSeries(name, path or name)
        self._read_times: ReadTimes | None = None
        self._verdicts: dict[str, str] = {}

    def progress(self, cols: ProgressColumns) -> None:
        """Progress events as columns, in record order (runners.edge.record's fast path: a long run's record is mostly
        these). A record from before Progress carried the engine's step time (`step_time` False) is timed by the
        engine's rule over its read times."""
        run, attempt = self.run, self.run.attempt
        point_rank = _picked(cols.rank, cols.point_event)
        for rank in sorted(set(cols.rank)):
            rs = run.ranks.get(rank)
            if rs is None:
                rs = run.ranks[rank] = RankSeries(rank)
            pts = _where(point_rank, rank)
            rs.loss_steps += _picked(cols.point_step, pts)
            rs.loss_values += _picked(cols.point_loss, pts)
            rs.loss_attempts += [attempt] * len(pts)
            stepped = _where(cols.rank, rank)
            if None in cols.step:
                stepped = [i for i in stepped if cols.step[i] is not None]
            times = _picked(cols.step_time, stepped)
            if any(t is False for t in times):  # an older record's: timed by its read times
                self._read_times = self._read_times or ReadTimes()
                times = [self._timed(rank, cols.wall[i], cols.step[i]) if t is False else t  # type: ignore[arg-type]
                         for i, t in zip(stepped, times, strict=True)]
            rs.steps += _picked(cols.step, stepped)
            rs.walls += _picked(cols.wall, stepped)
            rs.step_times += times
            rs.samples += _picked(cols.samples, stepped)
            rs.attempts += [attempt] * len(stepped)

    def _timed(self, rank: int, wall: float, step: int) -> float | None:
        clock = self._read_times.add(rank, wall, step)  # type: ignore[union-attr]
        return clock.step_time() if clock is not None else None

    def event(self, e: ev.Event) -> None:
        if isinstance(e, ev.Progress):
            self.progress(event_columns([e]))
            return
        run = self.run
        run.others.append(e)
        if isinstance(e, ev.RunStarted):
            run.started, run.profile, run.runner, run.world_size = e.wall, e.profile, e.runner, e.world_size
        elif isinstance(e, ev.RunFinished):
            run.ended, run.status = e.wall, e.status
        elif isinstance(e, ev.AttemptStarted):
            run.attempt = e.attempt
        elif isinstance(e, (ev.CrashVerdict, ev.ReplicaDiverged, ev.ReplicaVerdict)):
            self._verdicts[e.kind] = e.text
        elif isinstance(e, ev.HangVerdict):
            self._verdicts["slow" if e.reason == "slow" else "hang"] = e.text

    def result(self) -> RunSeries:
        run, v = self.run, self._verdicts
        if not run.world_size:
            run.world_size = len(run.ranks)
        first = next((v[k] for k in ("crash_verdict", "hang", "replica_diverged", "slow", "replica_verdict") if v.get(k)),
                     "")
        run.verdict = verdict_line(run.status, first)
        return run


def fold(events: Iterable[ev.Event], name: str, path: str = "") -> RunSeries:
    """A record's events (as runners.edge.record reads them) folded into a RunSeries."""
    folder = RunFolder(name, path)
    for e in events:
        folder.event(e)
    return folder.result()


def _where(col: list, value) -> list[int]:
    """The indexes of col's items equal to value (in C: compress over map)."""
    return list(compress(range(len(col)), map(value.__eq__, col)))


def _picked(col: list, idx: list[int]) -> list:
    """col's items at idx, in C (itemgetter)."""
    if not idx:
        return []
    got = itemgetter(*idx)(col)
    return list(got) if len(idx) > 1 else [got]


def verdict_line(status: str, text: str) -> str:
    """'ok: replicas identical ...', 'failed: rank 1 ...': the status, then the verdict that decided it, one line."""
    text = " ".join(text.split())
    return f"{status}: {text}" if text else status
