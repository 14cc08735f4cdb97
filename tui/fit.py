"""How the run screen shares its rows between the rank panes and the loss chart, so every pane keeps its newest lines in view."""
from __future__ import annotations

from dataclasses import dataclass

PANE_FRAME = 3  # a pane's border rows (top, bottom) and its status line
BAR = 1  # the progress bar row under the status line
TAIL_MIN = 1  # log rows a pane keeps whatever the screen: its newest line
TAIL_WANT = 3  # log rows per pane the chart gives up rows for
CHART_MIN = 9  # three rows of curve; fewer and plotext draws nothing readable: the chart is hidden instead
CHART_BASE = 12  # the chart's height on a small screen when rows are plenty (at 80x24)
CHART_SHARE = 0.38  # of the ranks box, on a big screen: the curves get taller as the terminal does
CHART_SHARE_MANY = 0.25  # the same with more than 16 ranks, whose panes need the rows
CHART_MAX = 40  # rows; a taller chart shows no more (it is as fine as the losses it thins) and costs more to draw


@dataclass(frozen=True)
class Fit:
    chart: int  # rows of the loss chart; 0: hidden
    bars: bool  # whether the panes keep their progress bar row
    row: int | None  # fixed pane height when not even that fits (the grid scrolls); None: panes share the rows


def chart_rows(ranks: int, box: int) -> int:
    """The chart's height when rows are plenty: a share of the `box` rows of the ranks tab, not less than it has on a
    small screen; smaller for many ranks, whose panes need the rows. fit() shrinks it when the panes need them."""
    many = ranks > 16
    share = round(box * (CHART_SHARE_MANY if many else CHART_SHARE))
    return min(CHART_MAX, max(CHART_MIN if many else CHART_BASE, share))


def fit(box: int, grid_rows: int, chart: int) -> Fit:
    """Split `box` rows between `grid_rows` rows of panes and a chart that would like `chart` rows.

    In order, until every pane has TAIL_WANT log rows: the chart shrinks (not below CHART_MIN), the progress
    bars go (the status line still says step N/M), the chart goes (at 80x24 four panes of a few lines read
    better than a chart over panes of one line); then the panes shrink to their newest line, and last they get a
    fixed height and the grid scrolls.
    """
    if grid_rows <= 0:
        return Fit(chart, True, None)

    def need(bars: bool, tail: int) -> int:
        return grid_rows * (PANE_FRAME + (BAR if bars else 0) + tail)

    for bars in (True, False):
        if box - chart >= need(bars, TAIL_WANT):
            return Fit(chart, bars, None)
        if box - need(bars, TAIL_WANT) >= CHART_MIN:
            return Fit(box - need(bars, TAIL_WANT), bars, None)
    for tail in (TAIL_WANT, TAIL_MIN):
        for bars in (True, False):
            if box >= need(bars, tail):
                return Fit(0, bars, None)
    return Fit(0, False, PANE_FRAME + TAIL_MIN)
