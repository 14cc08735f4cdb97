"""The loss or step-time curves of several runs overlaid, one curve a run (the mean over its ranks at each step), drawn
by the run screen's loss chart (its axes, legend and NO_COLOR marks)."""
from __future__ import annotations

import math

from ..chart_scale import choose_scale, step_label
from ..compare_table import letter, mean_losses
from ..history import extremes
from ..run_series import RunSeries
from .loss_chart import PALETTE, POINT_BUDGET, ChartData, LossChart, Series


def mean_step_times(run: RunSeries) -> dict[int, float]:
    """step -> the mean of the engine's step times the ranks had at that step (the last attempt)."""
    acc: dict[int, list[float]] = {}
    for rs in run.ranks.values():
        for s, st, a in zip(rs.steps, rs.step_times, rs.attempts, strict=True):
            if a == run.attempt and st is not None and math.isfinite(st):
                acc.setdefault(s, []).append(st)
    return {s: sum(v) / len(v) for s, v in acc.items()}


def compare_chart_data(runs: list[RunSeries], what: str = "loss", columns: int | None = None,
                       budget: int = POINT_BUDGET) -> ChartData:
    """One Series a run, named by its letter (A, B, ...), thinned to the chart's width with lows and highs kept."""
    per_run = max(30, min(budget // max(1, len(runs)), 2 * columns if columns else budget))
    series, not_finite, x0, x1 = [], 0, None, None
    for i, run in enumerate(runs):
        by_step = mean_losses(run) if what == "loss" else mean_step_times(run)
        pts = sorted(by_step.items())
        if not pts:
            continue
        not_finite += sum(1 for _, v in pts if not math.isfinite(v))
        pts = extremes([p for p in pts if math.isfinite(p[1])], per_run)
        if not pts:
            continue
        x0 = pts[0][0] if x0 is None else min(x0, pts[0][0])
        x1 = pts[-1][0] if x1 is None else max(x1, pts[-1][0])
        series.append(Series(letter(i), PALETTE[i % len(PALETTE)], [p[0] for p in pts], [p[1] for p in pts],
                             pts[-1][1]))
    if not series or x0 is None or x1 is None:
        return ChartData(what=what, ranks=len(runs))
    ys = [y for s in series for y in s.ys]
    lo, hi = min(ys), max(ys)
    steps = f"steps {step_label(x0)}–{step_label(x1)}"
    return ChartData(tuple(series), lo, hi, choose_scale(lo, hi), steps, "", "mean over each run's ranks", "",
                     len(runs), False, not_finite, what, True)


class CompareChart(LossChart):
    """A LossChart whose curves are runs rather than ranks (`runs` set, then `redraw`)."""

    def __init__(self, what: str = "loss", **kw) -> None:
        super().__init__(None, **kw)
        self.what = what
        self.runs: list[RunSeries] = []

    def redraw(self) -> None:
        self.data = compare_chart_data(self.runs, self.what, columns=self.size.width or None)
        self.refresh()

    def on_resize(self) -> None:
        self.redraw()
