"""When quiet ranks count as stalled: the limit rule that applies to each rank, and CPU evidence that a quiet rank is busy."""
from __future__ import annotations

from dataclasses import dataclass

from .steptime import median_step
from .words import ranks_text, seconds_words

QUIET = 1.0  # seconds without progress that make a rank part of a stall another rank triggered
AUTO_FACTOR, AUTO_MIN, AUTO_UNKNOWN = 20.0, 10.0, 30.0  # stall_after auto: 20 x median step, >= 10 s; 30 s before
BUSY_WINDOW = 3.0  # seconds of CPU time looked at (never more than the rank has been quiet)
BUSY_HOLD = 3.0  # a busy quiet rank holds a stall off until the quiet time reaches this many times the limit
# ... times the machine's overload (load / cores: a rank gets that much less of a core than alone), at most this much:
# on a machine far over its cores a busy rank's steps take that much longer, which is no fault of the run's
OVERLOAD_HOLD_MAX = 10.0
BLOCKED_CPU = 0.03  # a rank blocked in a collective uses ~0.5 % of a core; never call less than 3 % busy
BUSY_CPU = 0.25  # enough to be busy on a machine with a core to spare per rank


@dataclass(frozen=True)
class Limit:
    seconds: float
    rule: str  # which rule set it, with its numbers


@dataclass(frozen=True)
class Quiet:
    """One live rank as the stall rule sees it."""

    rank: int
    quiet: float  # seconds since its last step or output
    limit: Limit
    cpu: float | None  # share of a core over the recent window; None: not measured
    # why there can be no CPU evidence at all ("runs on node1": another machine's process): such a rank is neither
    # busy nor idle to the busy test; its stacks, taken on its node, tell whether it waits
    no_cpu: str = ""
    by: str = ""  # what dates its quiet when no output does (RankTrack.quiet_by); "" for its last step or line

    def words(self) -> str:
        """'no step or output for 42 s', or what dated it: 'no sign of progress for 42 s (its output cannot be read;
        ...)'."""
        return (f"no sign of progress for {self.quiet:.0f} s ({self.by})" if self.by
                else f"no step or output for {self.quiet:.0f} s")

    @property
    def over(self) -> bool:
        return self.quiet > self.limit.seconds


@dataclass(frozen=True)
class Stall:
    stalled: list[int]
    progressing: list[int]
    trigger: Quiet  # the rank furthest past its limit
    reason: str  # what fired, with the numbers that applied
    quiet: tuple[Quiet, ...] = ()  # every live rank as judged


@dataclass(frozen=True)
class Held:
    """Ranks are past their limit but some quiet rank keeps burning CPU: not a stall (yet)."""

    busy: dict[int, float]  # rank -> share of a core
    trigger: Quiet
    until: float  # quiet seconds at which the hold ends
    reason: str


def base_limit(profile, median: float | None) -> Limit:
    if profile.stall_after != "auto":
        return Limit(float(profile.stall_after), f"stall_after {float(profile.stall_after):g} s")
    if median is None:
        return Limit(AUTO_UNKNOWN, f"stall_after auto: {AUTO_UNKNOWN:g} s until step times are known")
    return Limit(max(AUTO_MIN, AUTO_FACTOR * median),
                 f"stall_after auto = {AUTO_FACTOR:g} x median step {seconds_words(median)}, min {AUTO_MIN:g} s")


def limit_for(profile, started: bool, median: float | None) -> Limit:
    """The limit of one rank: `started` once it made its first step."""
    base = base_limit(profile, median)
    if not started and profile.startup_grace > base.seconds:
        return Limit(float(profile.startup_grace),
                     f"startup_grace {float(profile.startup_grace):g} s applies before the first step")
    return base


def cpu_share(hist, now: float, window: float) -> float | None:
    """Share of one core used over about the last `window` seconds, from (monotonic, cpu seconds) samples."""
    if not hist or window < 0.5:
        return None
    m1, c1 = hist[-1]
    if now - m1 > 1.5:  # stale: the rank is gone or sampling stopped
        return None
    start = None
    for m, c in reversed(hist):
        if m1 - m > window + 0.5:
            break
        start = (m, c)
    if start is None or m1 - start[0] < 0.5:
        return None
    return max(0.0, (c1 - start[1]) / (m1 - start[0]))


def busy_floor(ncpu: int, ranks: int, load: float) -> float:
    """The CPU share above which a quiet rank counts as busy: a quarter of its fair share of the machine."""
    share = ncpu / max(ncpu, ranks, load, 1)
    return min(BUSY_CPU, max(BLOCKED_CPU, 0.25 * share))


def load_words(load: float, cores: int) -> str:
    """'load 18.5 on 2 cpus': this machine's load against its cores, as the held, stall and slow-down lines say it."""
    return f"load {load:.1f} on {cores} cpu{'s' if cores > 1 else ''}"


def live_tracks(tracks) -> list:
    """The ranks a stall can be about: not finished (a finished rank may take seconds to exit), and whose process has
    not died (the death watch saw it go; its exit code may come only later, from its launcher's table)."""
    return [t for t in tracks if t.alive and not t.completed and t.exit_wall is None]


def quiet_ranks(profile, tracks, now: float, with_cpu: bool = True, no_cpu: dict[int, str] | None = None
                ) -> list[Quiet]:
    """Every live rank as the stall rule sees it. no_cpu: rank -> why it has no CPU evidence (on another node)."""
    no_cpu = no_cpu or {}
    live = live_tracks(tracks)
    median = median_step([t.clock for t in tracks])
    out = []
    for t in live:
        quiet = now - t.last_progress
        why = no_cpu.get(t.rank, "")
        cpu = cpu_share(t.cpu_hist, now, min(BUSY_WINDOW, quiet)) if with_cpu and not why else None
        out.append(Quiet(t.rank, quiet, limit_for(profile, t.past_first_step, median), cpu, why,
                         getattr(t, "quiet_by", "")))
    return out


def sharing_cores(quiet: list[Quiet]) -> int:
    """Ranks that share this machine's cores (the busy floor's count): a rank on another node uses none of them."""
    return sum(1 for q in quiet if not q.no_cpu)


def any_over(quiet: list[Quiet]) -> bool:
    return any(q.over for q in quiet)


def judge(quiet: list[Quiet], floor: float, cores: int = 0, load: float = 0.0) -> Stall | Held | None:
    """Stall, Held (past the limit, but a quiet rank is busy on CPU) or None. cores/load: this machine's, whose
    overload (load / cores) lengthens the busy hold up to OVERLOAD_HOLD_MAX times (0 cores: not known)."""
    over = [q for q in quiet if q.over]
    if not over:
        return None
    trigger = max(over, key=lambda q: (q.quiet / q.limit.seconds, q.quiet))
    stalled = sorted({q.rank for q in over} | {q.rank for q in quiet if q.quiet > QUIET})
    progressing = sorted(q.rank for q in quiet if q.rank not in stalled)
    said = f"{trigger.words()} ({trigger.limit.rule})"
    blind = [q for q in quiet if q.rank in stalled and q.no_cpu]
    if blind:
        said += f"; {_no_cpu_words(blind)}"
    busy = {q.rank: q.cpu for q in quiet if q.rank in stalled and q.cpu is not None and q.cpu >= floor}
    if busy:
        over_cores = load / cores if cores > 0 else 1.0
        factor = min(max(1.0, over_cores), OVERLOAD_HOLD_MAX)
        until = BUSY_HOLD * factor * trigger.limit.seconds
        cpu = _cpu_words(busy)
        hold, note = f"{BUSY_HOLD:g} x the limit", ""
        if factor > 1.0:
            hold += f" x {factor:.1f}"
            note = (f"; the machine is overloaded ({load_words(load, cores)}): the hold "
                    f"grows with its load over its cores, up to {OVERLOAD_HOLD_MAX:g} x")
        if trigger.quiet <= until:
            return Held(busy, trigger, until, f"{said}, but {cpu}: busy, not stalled; held until {until:.0f} s "
                                                f"({hold}{note})")
        return Stall(stalled, progressing, trigger,
                     f"{said}; {cpu}, held {hold} ({until:.0f} s{note}) without a step: busy but not progressing",
                     tuple(quiet))
    return Stall(stalled, progressing, trigger, said, tuple(quiet))


def _cpu_words(busy: dict[int, float]) -> str:
    ranks = sorted(busy)
    lo, hi = min(busy.values()) * 100, max(busy.values()) * 100
    pct = f"{lo:.0f} %" if round(lo) == round(hi) else f"{lo:.0f}-{hi:.0f} %"
    who = ranks_text(ranks, spans=True)
    return f"{who} still {'uses' if len(ranks) == 1 else 'use'} {pct} of a core{'' if len(ranks) == 1 else ' each'}"


def _no_cpu_words(blind: list[Quiet]) -> str:
    whys = list(dict.fromkeys(q.no_cpu for q in blind))
    ranks = [q.rank for q in blind]
    who = ranks_text(ranks, sort=False, spans=True)
    return f"no CPU evidence for {who} ({', '.join(whys)}): judged by quiet time alone"
