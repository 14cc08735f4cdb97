"""A run record's steps, losses, step times and samples per rank, folded from its events: what compare and export
read (pure)."""
from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

from ..runners import events as ev
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
    losses: list[tuple[int, int, float]] = field(default_factory=list)  # (attempt, step, loss), in record order


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


def fold(events: Iterable[ev.Event], name: str, path: str = "") -> RunSeries:
    """Fold a record's events (as runners.edge.record reads them) into a RunSeries. A record from before Progress
    carried the engine's step time (`step_time` False) is timed by the engine's rule over its read times."""
    run = RunSeries(name, path or name)
    read_times: ReadTimes | None = None
    crash = hang = diverged = replica = slow = ""
    for e in events:
        if isinstance(e, ev.Progress):
            rs = run.ranks.get(e.rank)
            if rs is None:
                rs = run.ranks[e.rank] = RankSeries(e.rank)
            if e.losses:
                rs.losses.extend((run.attempt, int(s), float(v)) for s, v in e.losses)
            elif e.loss is not None and e.step is not None:
                rs.losses.append((run.attempt, e.step, float(e.loss)))
            if e.step is None:
                continue
            st = e.step_time
            if st is False:
                read_times = read_times or ReadTimes()
                clock = read_times.add(e.rank, e.wall, e.step)
                st = clock.step_time() if clock is not None else None
            rs.steps.append(e.step)
            rs.walls.append(e.wall)
            rs.step_times.append(None if st is None else float(st))
            rs.samples.append(e.samples)
            rs.attempts.append(run.attempt)
            continue
        run.others.append(e)
        if isinstance(e, ev.RunStarted):
            run.started, run.profile, run.runner, run.world_size = e.wall, e.profile, e.runner, e.world_size
        elif isinstance(e, ev.RunFinished):
            run.ended, run.status = e.wall, e.status
        elif isinstance(e, ev.AttemptStarted):
            run.attempt = e.attempt
        elif isinstance(e, ev.CrashVerdict):
            crash = e.text
        elif isinstance(e, ev.HangVerdict):
            if e.reason == "slow":
                slow = e.text
            else:
                hang = e.text
        elif isinstance(e, ev.ReplicaDiverged):
            diverged = e.text
        elif isinstance(e, ev.ReplicaVerdict):
            replica = e.text
    if not run.world_size:
        run.world_size = len(run.ranks)
    run.verdict = verdict_line(run.status, crash or hang or diverged or slow or replica)
    return run


def verdict_line(status: str, text: str) -> str:
    """'ok: replicas identical ...', 'failed: rank 1 ...': the status, then the verdict that decided it, one line."""
    text = " ".join(text.split())
    return f"{status}: {text}" if text else status


def finite(v: float | None) -> bool:
    return v is not None and math.isfinite(v)
