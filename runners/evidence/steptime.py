"""Step durations per rank, from the rank's own clock (read times only as a fallback), and the slow-down rule."""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from .words import seconds_words

BASE_STEPS = 20  # the early steps a rank's baseline step time is the median of
SLOWER = 4.0  # recent steps this many times the baseline: the rank slowed down
RECENT_STEPS, RECENT_SECONDS = 3, 1.0  # "recent" spans at least 3 steps and 1 s: one hiccup of a loaded machine is not a slow-down
KEEP = 256  # samples kept per rank
MARKS = 128  # (step, time) marks kept per rank: at ~10 reports a second, the last 12 s or more


def weighted_median(samples) -> float | None:
    """Median of (value, weight) pairs, each value counted weight times."""
    pairs = sorted(samples)
    total = sum(w for _, w in pairs)
    if total <= 0:
        return None
    acc = 0.0
    for v, w in pairs:
        acc += w
        if acc >= total / 2:
            return v
    return pairs[-1][0]


class StepClock:
    """One rank's step durations as (seconds per step, steps) samples, newest last.

    A rank that reports `at` ([step, its own monotonic time]) and `dt` (the durations of its newest single
    steps) is timed by its own clock only. Otherwise steps are timed by the engine's read times, from the
    newest step of one read to the newest of the next (steps read together share one read time).
    """

    def __init__(self) -> None:
        self.own = False
        self.samples: deque = deque(maxlen=KEEP)
        self.early: list = []  # the first samples, until they cover BASE_STEPS steps
        self.timed_steps = 0  # steps the early samples cover
        self.timed_to: int | None = None  # the step the newest sample ends at: how far this clock has seen
        self.all_seconds, self.all_steps = 0.0, 0  # every sample's seconds and steps, for the run's mean pace
        self._mark: tuple[int, float] | None = None  # (step, time) the next span starts from
        self._read: tuple[int, float] | None = None  # (newest step, read time) of the current read
        # when each newest step was counted: (step, the rank's monotonic time or the engine's read time, the rank's
        # wall time or None); read-time marks are engine time, and own marks replace them once the rank stamps
        self.marks: deque = deque(maxlen=MARKS)

    def _add(self, per_step: float, steps: int) -> None:
        if steps <= 0 or per_step < 0:
            return
        self.samples.append((per_step, steps))
        self.all_seconds += per_step * steps
        self.all_steps += steps
        if self.timed_steps < BASE_STEPS:
            self.early.append((per_step, steps))
            self.timed_steps += steps

    def _marked(self, step: int, t: float, wall: float | None) -> None:
        m = self.marks
        if m and (step < m[-1][0] or t < m[-1][1]):  # the count (or the clock) started over: a new process
            m.clear()
        if m and t == m[-1][1]:  # one read: its newest step
            m[-1] = (max(step, m[-1][0]), t, wall)
        elif not m or step > m[-1][0]:
            m.append((step, t, wall))

    def reported(self, step: int, at: float, dts=(), wall: float | None = None) -> None:
        """A report stamped by the rank: step `step` was counted at its time `at` (and its wall time `wall`); `dts`
        are the durations of the single steps that led to it (newest last, possibly fewer than the steps since the
        last report)."""
        if not self.own:  # the rank's clock replaces read-time estimates from here on
            self.own, self._read, self._mark = True, None, None
            self.samples.clear()
            self.early.clear()
            self.timed_steps = 0
            self.all_seconds, self.all_steps = 0.0, 0
            self.marks.clear()
        self._marked(step, at, wall)
        mark, self._mark = self._mark, (step, at)
        self.timed_to = step
        dts = [d for d in dts if isinstance(d, (int, float)) and d >= 0]
        if mark is None or step <= mark[0] or at < mark[1]:
            for d in dts:  # no span to check them against (first report, or the rank's count restarted)
                self._add(d, 1)
            return
        span, seconds = step - mark[0], at - mark[1]
        dts = dts[-span:]
        rest, rest_s = span - len(dts), max(0.0, seconds - sum(dts))
        if rest:  # the steps the rank did not time one by one: their mean
            self._add(rest_s / rest, rest)
        for d in dts:
            self._add(d, 1)

    def read(self, step: int, mono: float) -> None:
        """A step parsed from output (or reported without a stamp), read at engine time `mono`."""
        if self.own:
            return
        self._marked(step, mono, None)
        cur = self._read
        if cur is not None and mono == cur[1]:
            if step > cur[0]:
                self._read = (step, mono)
            return
        self._close_read()  # a new read: the previous one is complete
        self._read = (step, mono)

    def read_whole(self, step: int, mono: float) -> None:
        """A read known complete as it arrives: the newest step of one Progress event, at its read time (a record
        from before Progress carried the engine's step time, timed by the same rule)."""
        self.read(step, mono)
        if not self.own:
            self._close_read()
            self._read = None

    def _close_read(self) -> None:
        """The current read is complete: time it against the one before."""
        cur, mark = self._read, self._mark
        if cur is None:
            return
        if mark is not None and cur[0] > mark[0] and cur[1] > mark[1]:
            self._add((cur[1] - mark[1]) / (cur[0] - mark[0]), cur[0] - mark[0])
            self.timed_to = cur[0]
        self._mark = cur

    def baseline(self) -> float | None:
        """Median duration of the rank's first BASE_STEPS timed steps (its first step, start-up, is never timed)."""
        return weighted_median(self.early) if self.timed_steps >= BASE_STEPS else None

    def recent(self) -> float | None:
        """Median duration of the newest steps: at least RECENT_STEPS of them covering RECENT_SECONDS."""
        picked, steps, seconds = [], 0, 0.0
        for per_step, n in reversed(self.samples):
            picked.append((per_step, n))
            steps, seconds = steps + n, seconds + per_step * n
            if steps >= RECENT_STEPS and seconds >= RECENT_SECONDS:
                break
        if steps < RECENT_STEPS or seconds < RECENT_SECONDS:
            return None
        return weighted_median(picked)

    def step_time(self) -> float | None:
        """The rank's step time as every front end shows it: `recent()`, the figure a slow-down verdict compares, or
        while too few steps are timed for it, the median of those that are; None before any step is timed."""
        now = self.recent()
        return now if now is not None else weighted_median(self.samples)

    def mean(self) -> float | None:
        """Seconds per step over every step timed, first to last (a rank's pace over the run); None before any."""
        return self.all_seconds / self.all_steps if self.all_steps else None


def median_step(clocks) -> float | None:
    """The typical step time across ranks (recent samples of every rank), or None before 3 steps are timed."""
    pool = [s for c in clocks for s in list(c.samples)[-64:]]
    return weighted_median(pool) if sum(n for _, n in pool) >= 3 else None


@dataclass(frozen=True)
class SlowDown:
    rank: int
    recent: float  # seconds per step now
    baseline: float  # seconds per step over its first steps
    base_steps: int  # how many steps the baseline covers
    step: int | None = None  # the step its recent steps end at (StepClock.timed_to)

    @property
    def ratio(self) -> float:
        return self.recent / self.baseline if self.baseline > 0 else float("inf")

    def detail(self) -> str:
        return (f"steps take {seconds_words(self.recent)}, {self.ratio:.0f}x its first {self.base_steps} steps' "
                f"{seconds_words(self.baseline)}")

    def text(self) -> str:
        return f"rank {self.rank}'s {self.detail()}"


def slowed_down(clocks: dict) -> list[SlowDown]:
    """Ranks whose recent steps take SLOWER times their own baseline or more. `clocks`: rank -> StepClock."""
    out = []
    for rank, c in sorted(clocks.items()):
        base, now = c.baseline(), c.recent()
        if base is None or now is None:
            continue
        if now >= SLOWER * base and now - base >= 0.001:  # a microsecond loop jittering is not a slow-down
            out.append(SlowDown(rank, now, base, c.timed_steps, c.timed_to))
    return out


def pace_known(downs: list[SlowDown], clocks: dict) -> bool:
    """Every other rank's clock has seen as far as the slowed ranks' (its newest timed step at least theirs), so
    its pace can be compared over the same steps. Reports arrive batched (0.1 s apart per rank): a rank in lock-step
    with a slowed one may simply not have reported its slow steps yet, and must not be taken for one that kept
    its pace. A rank never timed yet is not waited for."""
    reached = [d.step for d in downs if d.step is not None]
    if not reached:
        return True
    slowed = {d.rank for d in downs}
    point = max(reached)
    return all(c.timed_to is None or c.timed_to >= point for r, c in clocks.items() if r not in slowed)


def slowed_together(downs: list[SlowDown], clocks: dict) -> bool:
    """Every timed rank slowed down at once (lock-step collectives make the others wait for the slow one): only
    stacks can tell whose own work grew. False when some ranks kept their pace: the slowed ones are named as is."""
    timed = {r for r, c in clocks.items() if c.baseline() is not None and c.recent() is not None}
    return len(timed) > 1 and {d.rank for d in downs} == timed


def take_report(clock: StepClock, rep: dict, steps: list, mono: float) -> None:
    """Time a `step`/`loss` report: by the rank's `at`/`dt` stamps, or by read time when it has none."""
    at, dts = rep.get("at"), rep.get("dt")
    if (isinstance(at, list) and len(at) in (2, 3) and isinstance(at[0], int) and not isinstance(at[0], bool)
            and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in at[1:])):
        clock.reported(at[0], float(at[1]), dts if isinstance(dts, list) else (),
                       float(at[2]) if len(at) == 3 else None)
    elif steps:
        clock.read(max(steps), mono)
