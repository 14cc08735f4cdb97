"""The run's pace and time left from the ranks' step times (the engine's), and the machine's load, in words: pure."""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ..runners.events import rank_ended
from ..runners.evidence.steptime import StepClock
from ..runners.evidence.words import clock_words


class ReadTimes:
    """Step times of a record from before Progress carried the engine's (`Progress.step_time` False): the engine's
    rule (runners/evidence/steptime.py StepClock) over each rank's Progress read times. One event per rank per engine
    turn holds every step since the previous one, read at one time: each is one whole read, its newest step a point."""

    def __init__(self) -> None:
        self.clocks: dict[int, StepClock] = {}

    def add(self, rank: int, wall: float, step: int | None) -> StepClock | None:
        """Fold one Progress event in; the rank's clock (None before it had a step)."""
        clock = self.clocks.get(rank)
        if step is None:
            return clock
        if clock is None or (clock.marks and step < clock.marks[-1][0]):  # counting from 0 again: a restart
            clock = self.clocks[rank] = StepClock()
        clock.read_whole(step, wall)
        return clock


@dataclass(frozen=True)
class Pace:
    """The run's pace: the rank that finishes last sets it."""

    rank: int  # the rank finishing last (or the slowest, when the run has no step count)
    step_time: float  # its seconds per step
    eta: float | None  # seconds until it reaches the run's last step; None without a step count

    @property
    def steps_per_s(self) -> float:
        return 1.0 / self.step_time if self.step_time > 0 else float("inf")


LATE_STEPS, LATE_MIN = 3.0, 2.0  # a step is late after 3 step times of the run's pace, and never before 2 s


def late_after(step_time: float) -> float:
    """Seconds without a step after which the next one is late, by a pace of `step_time` seconds a step. Progress is
    read in batches (a rank's report every 0.1 s, the engine's reads every 0.25 s, later on a loaded machine), so a
    fast run's silence of a few step times is how it is read: not before LATE_MIN."""
    return max(LATE_STEPS * step_time, LATE_MIN)


def step_time_now(rv, now: float | None) -> float | None:
    """A rank's step time as of `now`: once its newest step (`step_wall`) is late, the time since then, which keeps
    growing (the step in flight has taken at least that long), so a pace read from it decays while no step comes."""
    st = rv.step_time
    wall = getattr(rv, "step_wall", None)
    if st is None or now is None or wall is None:
        return st
    quiet = now - wall
    return quiet if quiet > late_after(st) else st


def run_pace(ranks: Iterable, steps: int | None, now: float | None = None) -> Pace | None:
    """From RankView-like objects (rank, status, step, step_time, step_wall): the live ranks' slowest, by time left
    when the run has a step count (a rank far behind at the same pace finishes last), else by step time; with `now`,
    a rank whose newest step is late counts the time since it (`step_time_now`). None before any rank has a step
    time, or once every rank with one has ended or reached the last step."""
    best: tuple | None = None
    for rv in ranks:
        st = step_time_now(rv, now)
        if st is None or rank_ended(rv.status):
            continue
        if steps:
            done = rv.step or 0
            if done >= steps:
                continue
            eta = (steps - done) * st
            key = (eta, st)
        else:
            eta, key = None, (st, st)
        if best is None or key > best[0]:
            best = (key, Pace(rv.rank, st, eta))
    return best[1] if best is not None else None


def samples_rate(rv, now: float | None = None) -> float | None:
    """A rank's samples a second: its samples per step over its step time (as of `now`: `step_time_now`); None while
    either is unknown."""
    st = step_time_now(rv, now)
    return rv.samples / st if rv.samples and st else None


def run_samples_rate(ranks: Iterable, now: float | None = None) -> float | None:
    """The samples a second the live ranks train together (data parallel: each rank its own share of the global
    batch); None while no live rank's is known."""
    rates = [r for rv in ranks if not rank_ended(rv.status) and (r := samples_rate(rv, now)) is not None]
    return sum(rates) if rates else None


def no_step_for(ranks: Iterable, steps: int | None, now: float | None) -> float | None:
    """Seconds since the run's newest step, once it is late by the run's own pace (`late_after` of the step time of
    the rank that finishes last, as its steps came); None while a step is not late, or before the pace is known."""
    ranks = [rv for rv in ranks if not rank_ended(rv.status) and getattr(rv, "step_wall", None) is not None
             and not (steps and (rv.step or 0) >= steps)]
    pace = run_pace(ranks, steps)
    if now is None or pace is None:
        return None
    quiet = now - max(rv.step_wall for rv in ranks)
    return quiet if quiet > late_after(pace.step_time) else None


def fmt_samples_rate(per_s: float) -> str:
    """'512 samples/s', '3.2k samples/s', '1.5M samples/s', '0.75 samples/s'."""
    for unit, scale in (("M", 1e6), ("k", 1e3)):
        if per_s >= scale:
            v = per_s / scale
            return f"{v:.1f}{unit} samples/s" if v < 100 else f"{v:.0f}{unit} samples/s"
    if per_s >= 10:
        return f"{per_s:.0f} samples/s"
    return f"{per_s:.2g} samples/s"


def fmt_rate(steps_per_s: float) -> str:
    """'3.1 steps/s', '0.25 steps/s', '120 steps/s'."""
    if steps_per_s >= 100:
        return f"{steps_per_s:.0f} steps/s"
    if steps_per_s >= 1:
        return f"{steps_per_s:.1f} steps/s"
    return f"{steps_per_s:.2g} steps/s"


def fmt_step_time(seconds: float) -> str:
    """'0.31 s/step', '12 s/step', '4.2 ms/step'."""
    if seconds >= 10:
        return f"{seconds:.0f} s/step"
    if seconds >= 0.1:
        return f"{seconds:.2f} s/step"
    if seconds >= 0.01:
        return f"{seconds * 1000:.0f} ms/step"
    return f"{seconds * 1000:.2g} ms/step"


def overloaded(load: float, cpus: int) -> bool:
    """More runnable processes than CPUs, on average over the last minute: every process runs slower than alone."""
    return cpus > 0 and load > cpus


def load_text(load: float, cpus: int | None) -> str:
    """'load 1.2/2 cpus', or, past the machine's CPUs, 'load 29.7 on 2 cpus (overloaded)'."""
    if not cpus:
        return f"load {load:.1f}"
    unit = "cpu" if cpus == 1 else "cpus"
    if overloaded(load, cpus):
        return f"load {load:.1f} on {cpus} {unit} (overloaded)"
    return f"load {load:.1f}/{cpus} {unit}"


def phase_text(phase: str, since: float | None, now: float | None) -> str:
    """'rendezvous 12s': a rank's start-up phase and how long it has been in it."""
    if not phase:
        return ""
    if since is None or now is None:
        return phase
    return f"{phase} {clock_words(max(0.0, now - since))}"


class RunTally:
    """What the headless console says of a run's pace at its end: each rank's pace over the run (the engine's, from
    summary.json; for older records, its Progress read times by the engine's rule), its samples per step, and the
    highest load the engine's host had."""

    def __init__(self) -> None:
        self.read = ReadTimes()  # rank -> its steps by read time, for records whose summary has no step times
        self.samples: dict[int, int] = {}  # rank -> samples in its newest step that told them
        self.load: float | None = None
        self.cpus: int | None = None

    def progress(self, rank: int, wall: float, step: int | None, samples: int | None = None) -> None:
        if samples:
            self.samples[rank] = samples
        self.read.add(rank, wall, step)

    def resources(self, load: float | None, cpus: int | None) -> None:
        if load is not None and (self.load is None or load > self.load):
            self.load, self.cpus = load, cpus

    def step_times(self, ranks: dict | None = None) -> dict[int, float]:
        """rank -> seconds per step over the run: summary.json's `step_time_s` (the engine's StepClock.mean), where
        the summary has them, else by read times."""
        told = {int(r): info["step_time_s"] for r, info in (ranks or {}).items()
                if isinstance(info, dict) and "step_time_s" in info}
        if told:
            return {r: st for r, st in told.items() if st}
        return {r: st for r, c in self.read.clocks.items() if (st := c.mean())}

    def line(self, ranks: dict | None = None) -> str | None:
        """'pace: 3.1 steps/s, 0.32 s/step (rank 1, the slowest, first step to last), 800 samples/s (all ranks, 128
        a step each); machine load up to 29.7 on 2 cpus (overloaded)', or None when nothing was measured. `ranks`:
        summary.json's."""
        times = self.step_times(ranks)
        parts = []
        if times:
            r = max(times, key=lambda k: (times[k], -k))
            who = f"rank {r}, the slowest" if len(times) > 1 else f"rank {r}"
            pace = f"pace: {fmt_rate(1 / times[r])}, {fmt_step_time(times[r])} ({who}, first step to last)"
            told = {k: n for k, n in self.samples.items() if k in times}
            if told:
                sizes = sorted(set(told.values()))
                if len(sizes) > 1:
                    each = f"{sizes[0]}-{sizes[-1]} a step"
                else:
                    each = f"{sizes[0]} a step" + (" each" if len(told) > 1 else "")
                whose = "all ranks" if len(told) == len(self.read.clocks) else f"{len(told)} of {len(self.read.clocks)} ranks"
                pace += f", {fmt_samples_rate(sum(n / times[k] for k, n in told.items()))} ({whose}, {each})"
            parts.append(pace)
        if self.load is not None:
            parts.append(f"machine {load_text(self.load, self.cpus).replace('load ', 'load up to ', 1)}")
        return "; ".join(parts) or None
