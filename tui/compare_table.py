"""`ddptui compare`'s figures of each run (pace, step-time percentiles, samples/s, time to first step, losses at the
steps every run has) and the table that puts them side by side, as text and as JSON: pure."""
from __future__ import annotations

import math
from bisect import bisect_left
from dataclasses import dataclass, field
from itertools import accumulate, starmap
from operator import itemgetter, mul, sub
from typing import cast

from ..runners.evidence.words import seconds_words
from .chart_scale import fmt_num
from .rate import fmt_samples_rate
from .run_series import RankSeries, RunSeries

MATCHING_SHOWN = 6  # losses at this many of the steps every run has (the first, the last and evenly between)
JSON_MATCHING = 100  # and at this many in --json


def weighted_percentiles(pairs: list[tuple[float, float]], qs: tuple[float, ...]) -> list[float | None]:
    """The qs-th percentiles (0..100) of (value, weight) pairs, each value counted weight times (nearest rank)."""
    pairs = sorted(pairs)  # (already sorted runs, as a run's ranks' lists one after the other, merge in linear time)
    acc = list(accumulate(map(itemgetter(1), pairs)))
    total = acc[-1] if acc else 0
    if total <= 0:
        return [None] * len(qs)
    return [pairs[min(len(pairs) - 1, bisect_left(acc, total * q / 100.0 - 1e-9))][0] for q in qs]


def weighted_percentile(pairs: list[tuple[float, float]], q: float) -> float | None:
    return weighted_percentiles(pairs, (q,))[0]


@dataclass(frozen=True)
class RankFigures:
    rank: int
    steps: int  # the newest step (the run's last attempt)
    steps_per_s: float | None  # 1 / its mean step time (the engine's step times over its steps)
    p50: float | None  # step time percentiles over its steps (each event's step time, weighted by the steps it covers)
    p95: float | None
    samples_per_s: float | None  # samples per step (median over its steps) x steps/s; None when unknown
    first_step_s: float | None  # from the run's start to its first step


@dataclass(frozen=True)
class RunFigures:
    name: str
    path: str
    ranks: int
    status: str
    verdict: str
    ranks_figures: dict[int, RankFigures]
    steps: int | None  # the newest step of the slowest rank
    steps_per_s: float | None  # the slowest rank's: DDP's ranks step together
    p50: float | None  # over every rank's steps
    p95: float | None
    samples_per_s: float | None  # every rank's, summed (each its share of the global batch)
    first_step_s: float | None  # until every rank had its first step
    losses: dict[int, float] = field(default_factory=dict)  # step -> mean loss over the ranks that have it


def _attempt_start(attempts: list[int], attempt: int) -> int:
    """Where the run's last attempt begins in a rank's list (attempts only grow along it)."""
    return bisect_left(attempts, attempt)


def rank_figures(rs: RankSeries, attempt: int, started: float | None) -> tuple[RankFigures, list]:
    """One rank's figures, and its (step time, weight) pairs for the run's percentiles: each of its Progress events'
    step time, weighted by the steps it covers (the steps since the rank's previous event)."""
    a = _attempt_start(rs.attempts, attempt)
    steps, walls, times, samples = rs.steps[a:], rs.walls[a:], rs.step_times[a:], rs.samples[a:]
    if not steps:
        return RankFigures(rs.rank, 0, None, None, None, None, None), []
    weights = list(map(sub, steps, [0, *accumulate(steps[:-1], max)]))  # the steps since the rank's newest before
    if min(weights) < 0:  # a step counted again (a restart within the attempt): covers none
        weights = [max(0, w) for w in weights]
    if None in times or not all(map(math.isfinite, times)):  # type: ignore[arg-type]
        timed = [(t, w) for t, w in zip(times, weights, strict=True) if t is not None and math.isfinite(t)]
    else:
        timed = list(zip(cast(list[float], times), weights, strict=True))
    timed.sort()
    p50, p95 = weighted_percentiles(timed, (50, 95))
    spent = sum(starmap(mul, timed))  # seconds of the steps timed (by the rank's own clock where it stamps them)
    rate = sum(map(itemgetter(1), timed)) / spent if spent > 0 else None
    if rate is None and steps[-1] > steps[0] and walls[-1] > walls[0]:  # no step time: by the record's read times
        rate = (steps[-1] - steps[0]) / (walls[-1] - walls[0])
    counted: list[tuple[float, float]] = [(n, w) for n, w in zip(samples, weights, strict=True) if n] \
        if None in samples else list(zip(cast(list[float], samples), weights, strict=True))
    per_step = weighted_percentile(counted, 50)
    first_step = next((w for s, w in zip(steps, walls, strict=True) if s >= 1), None)
    since = first_step - started if first_step is not None and started is not None else None
    return RankFigures(rs.rank, steps[-1], rate, p50, p95, per_step * rate if per_step and rate else None,
                       since), timed


def mean_losses(run: RunSeries) -> dict[int, float]:
    """step -> the mean over the ranks of their loss at that step (the last attempt; NaN/inf left out)."""
    total: dict[int, float] = {}
    count: dict[int, int] = {}
    for rs in run.ranks.values():
        a = bisect_left(rs.loss_attempts, run.attempt)
        values = rs.loss_values[a:]
        seen = dict(zip(rs.loss_steps[a:], values, strict=True))  # a step reported twice: its newest loss
        if not all(map(math.isfinite, values)):
            seen = {s: v for s, v in seen.items() if math.isfinite(v)}
        if not total:
            total, count = seen, dict.fromkeys(seen, 1)
            continue
        for s, v in seen.items():
            total[s] = total.get(s, 0.0) + v
            count[s] = count.get(s, 0) + 1
    return {s: v / count[s] for s, v in total.items()} if len(run.ranks) > 1 else total


def run_figures(run: RunSeries) -> RunFigures:
    ranks: dict[int, RankFigures] = {}
    pool: list = []
    for r in sorted(run.ranks):
        ranks[r], timed = rank_figures(run.ranks[r], run.attempt, run.started)
        pool += timed
    stepped = [f for f in ranks.values() if f.steps]
    rates = [f.steps_per_s for f in stepped if f.steps_per_s]
    samples = [f.samples_per_s for f in stepped if f.samples_per_s]
    firsts = [f.first_step_s for f in stepped if f.first_step_s is not None]
    p50, p95 = weighted_percentiles(pool, (50, 95))
    return RunFigures(run.name, run.path, run.world_size or len(run.ranks), run.status, run.verdict, ranks,
                      min(f.steps for f in stepped) if stepped else None, min(rates) if rates else None, p50, p95,
                      sum(samples) if samples else None, max(firsts) if firsts else None, mean_losses(run))


def matching_steps(figs: list[RunFigures], shown: int = MATCHING_SHOWN) -> tuple[list[int], int]:
    """Up to `shown` of the steps at which every run has a loss (the first, the last, evenly between), and how many
    such steps there are."""
    if not figs:
        return [], 0
    common = set(figs[0].losses)
    for f in figs[1:]:
        common &= set(f.losses)
    steps = sorted(common)
    if len(steps) <= shown:
        return steps, len(steps)
    picks = sorted({steps[round(i * (len(steps) - 1) / (shown - 1))] for i in range(shown)})
    return picks, len(steps)


@dataclass(frozen=True)
class Row:
    label: str
    values: tuple  # one raw value per run (None: none), for JSON
    cells: tuple[str, ...]  # one cell per run, as the table shows it


@dataclass(frozen=True)
class Comparison:
    runs: tuple[RunFigures, ...]
    rows: tuple[Row, ...]
    common_steps: int  # steps at which every run has a loss
    notes: tuple[str, ...]  # what could not be compared, in words


def _change(v: float | None, base: float | None) -> str:
    if v is None or base is None or base == 0:
        return ""
    ratio = v / base
    if 0.5 <= ratio <= 2:
        pct = (ratio - 1) * 100
        return f" ({'+' if pct >= 0 else ''}{pct:.0f}%)"
    return f" (x{ratio:.3g})"


def _row(label: str, values: list, fmt, relative: bool = True) -> Row:
    cells = []
    for i, v in enumerate(values):
        cell = "—" if v is None else fmt(v)
        if relative and i and v is not None:
            cell += _change(v, values[0])
        cells.append(cell)
    return Row(label, tuple(values), tuple(cells))


def _rate(v: float) -> str:
    return f"{v:.3g}"


def compare(runs: list[RunSeries]) -> Comparison:
    """The runs side by side (compare_figures of each run's run_figures)."""
    return compare_figures([run_figures(r) for r in runs])


def compare_figures(figs: list[RunFigures]) -> Comparison:
    """The runs' figures side by side: the run's own figures, then each rank's where the runs have that rank (runs
    with different rank counts: the ranks they share per rank, the rest in total), then the losses at matching
    steps."""
    rows = [
        _row("ranks", [f.ranks for f in figs], str, relative=False),
        _row("status", [f.status for f in figs], str, relative=False),
        _row("steps", [f.steps for f in figs], str, relative=False),
        _row("steps/s", [f.steps_per_s for f in figs], _rate),
        _row("step time p50", [f.p50 for f in figs], seconds_words),
        _row("step time p95", [f.p95 for f in figs], seconds_words),
        _row("samples/s (total)", [f.samples_per_s for f in figs], lambda v: fmt_samples_rate(v).split()[0]),
        _row("time to first step", [f.first_step_s for f in figs], seconds_words),
    ]
    notes = []
    all_ranks = sorted({r for f in figs for r in f.ranks_figures})
    for r in all_ranks:
        per = [f.ranks_figures.get(r) for f in figs]
        rows.append(_row(f"rank {r} step p50", [p.p50 if p else None for p in per], seconds_words))
        rows.append(_row(f"rank {r} step p95", [p.p95 if p else None for p in per], seconds_words))
        rows.append(_row(f"rank {r} samples/s", [p.samples_per_s if p else None for p in per],
                         lambda v: fmt_samples_rate(v).split()[0]))
    counts = sorted({f.ranks for f in figs})
    if len(counts) > 1:
        notes.append("the runs have " + " and ".join(map(str, counts)) + " ranks: the ranks they share compared per "
                     "rank, the others only in the run's totals (steps/s, step time over every rank, samples/s)")
    steps, common = matching_steps(figs)
    for s in steps:
        rows.append(_row(f"loss at step {s}", [f.losses.get(s) for f in figs], fmt_num))
    if not common:
        notes.append("no step has a loss in every run")
    return Comparison(tuple(figs), tuple(rows), common, tuple(notes))


LABEL_W = 20


def letter(i: int) -> str:
    """A run's name in the table and the charts' legend: A, B, ... (then R26, R27, ...)."""
    return chr(ord("A") + i) if i < 26 else f"R{i}"


def table_lines(c: Comparison, width: int = 100) -> list[str]:
    """The comparison as text: a legend of the runs (letter, name, verdict), then one row per figure."""
    letters = [letter(i) for i in range(len(c.runs))]
    heads = [f"{k}: {f.name}  {f.verdict}" for k, f in zip(letters, c.runs, strict=True)]
    out = [h if len(h) <= width else h[:width - 1] + "…" for h in heads]  # a cut verdict says it was cut
    cell_w = max([12] + [len(x) for row in c.rows for x in row.cells])
    out.append("")
    out.append(" " * LABEL_W + "".join(k.ljust(cell_w + 2) for k in letters).rstrip())
    for row in c.rows:
        out.append(row.label.ljust(LABEL_W) + "".join(x.ljust(cell_w + 2) for x in row.cells).rstrip())
    if c.common_steps:
        out.append(f"(losses: the mean over each run's ranks; {c.common_steps} steps have a loss in every run)")
    out += [f"note: {n}" for n in c.notes]
    return out


def to_json(c: Comparison) -> dict:
    """The comparison as data: each run's figures (and each rank's), the matching losses, the notes."""
    runs = []
    for f in c.runs:
        runs.append({
            "name": f.name, "path": f.path, "ranks": f.ranks, "status": f.status, "verdict": f.verdict,
            "steps": f.steps, "steps_per_s": f.steps_per_s, "step_time_p50_s": f.p50, "step_time_p95_s": f.p95,
            "samples_per_s": f.samples_per_s, "time_to_first_step_s": f.first_step_s,
            "per_rank": {str(r): {"steps": p.steps, "steps_per_s": p.steps_per_s, "step_time_p50_s": p.p50,
                                  "step_time_p95_s": p.p95, "samples_per_s": p.samples_per_s,
                                  "time_to_first_step_s": p.first_step_s}
                         for r, p in f.ranks_figures.items()},
        })
    steps, _ = matching_steps(list(c.runs), shown=JSON_MATCHING)
    return {"runs": runs, "matching_steps": {"count": c.common_steps, "steps": steps,
                                             "losses": [[f.losses[s] for f in c.runs] for s in steps]},
            "notes": list(c.notes)}
