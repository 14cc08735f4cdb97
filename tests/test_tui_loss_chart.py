"""The loss chart: what it draws (chart_data), its axes and legend, and the chart on the run screen (Pilot)."""
from __future__ import annotations

import math

import pytest

from ddptui.runners import events as ev
from ddptui.tui.app import DdpApp
from ddptui.tui.model import LOSS_POINTS, RunModel
from ddptui.tui.widgets.loss_chart import (PALETTE, ChartData, LossChart, axes_for, chart_data, legend_lines,
                                           title_text)
from tests.support.ui import BRAILLE, ScriptSource, aio, canvas_cells, settle

pytestmark = pytest.mark.any_python

T0 = 1_700_000_000.0


def decaying(step: int, rank: int = 0, steps: int = 4000) -> float:
    """20 at step 0 down to about 1e-11 at the last step: the losses of a long healthy run."""
    return 20.0 * math.exp(-step * math.log(2e12) / steps) * (1 + 0.05 * rank)


def model_with(ranks: int, points: int, loss=decaying, steps: int | None = None) -> RunModel:
    m = RunModel()
    m.apply([ev.RunStarted("/runs/x", "p", "torchrun", ranks, steps, T0)])
    m.apply([ev.Progress(r, points - 1, None, T0 + 1, "report",
                         tuple((s, loss(s, r, points)) for s in range(points))) for r in range(ranks)])
    return m


def run_batches(ranks: int = 2, points: int = 4000) -> list[list[ev.Event]]:
    """A run whose ranks report losses from 20 down to about 1e-11, in batches as the engine sends them."""
    b = [[ev.RunStarted("/runs/x-long", "long", "torchrun", ranks, points, T0),
          ev.ProcessStarted("torchrun", 4242, tuple(range(ranks)), T0)],
         [ev.RankHello(r, 5000 + r, "host-a", ranks, T0 + 0.5) for r in range(ranks)]
         + [ev.RankState(r, "running", "", T0 + 0.5) for r in range(ranks)]]
    per = 500
    for start in range(0, points, per):
        pts = range(start, min(points, start + per))
        b.append([ev.LogLines(r, "out", T0 + 1 + start, start, (f"step {start} loss {decaying(start, r):.3g}",))
                  for r in range(ranks)]
                 + [ev.Progress(r, pts[-1], None, T0 + 1 + start, "report",
                                tuple((s, decaying(s, r)) for s in pts)) for r in range(ranks)])
    return b


# -- what is drawn ----------------------------------------------------------------------------------------------
def test_a_long_run_spanning_twelve_decades_is_drawn_on_a_log_scale():
    d = chart_data(model_with(2, 4000), columns=150)
    assert d.scale == "log" and d.lo < 1e-10 and d.hi == pytest.approx(21.0)
    assert [s.name for s in d.series] == ["r0", "r1"] and d.series[0].color != d.series[1].color
    assert all(len(s.xs) <= 300 for s in d.series)  # two braille dots a cell: no more points than it can show
    title = title_text(d, 150)
    assert title.startswith("loss, log scale · steps 0–3999") and "every 14th point" in title
    assert "each rank's last 4000 points" in title  # the model keeps LOSS_POINTS a rank: older ones are gone
    assert LOSS_POINTS == 4000


def test_losses_at_or_below_zero_or_not_finite_keep_a_linear_scale_and_are_said():
    d = chart_data(model_with(1, 50, lambda s, r, n: 1.0 - s / 25))  # 1 .. -0.96
    assert d.scale == "linear" and d.lo < 0
    bad = chart_data(model_with(1, 50, lambda s, r, n: math.nan if s % 10 == 0 else 10.0 ** -(s / 5)))
    assert bad.scale == "log" and bad.not_finite == 5 and all(math.isfinite(y) for y in bad.series[0].ys)
    assert "5 NaN/inf not drawn" in title_text(bad, 160)
    axes = axes_for(bad, 120, 14)
    assert axes.scale == "log" and axes.ylim[0] <= bad.lo and axes.ylim[1] >= bad.hi


def test_a_short_run_is_linear_with_every_point_and_the_planned_steps():
    d = chart_data(model_with(3, 50, lambda s, r, n: 2.3 - s / 50 + 0.1 * r, steps=500))
    assert d.scale == "linear" and all(len(s.xs) == 50 for s in d.series)
    title = title_text(d, 160)
    assert "steps 0–49 of 500" in title and "every" not in title and "last" not in title
    assert "spread at step 49: 0.2 (1.32–1.52)" in title


def test_many_ranks_are_drawn_as_min_median_max():
    d = chart_data(model_with(64, 1000), columns=150)
    assert d.summary and [s.name for s in d.series] == ["max", "median", "min"]
    mx, md, mn = d.series
    assert mx.xs == md.xs == mn.xs and len(mx.xs) <= 250
    assert all(a >= b >= c for a, b, c in zip(mx.ys, md.ys, mn.ys))
    assert mx.ys[0] == pytest.approx(decaying(0, 63)) and mn.ys[0] == pytest.approx(decaying(0, 0))
    # the legend's newest values are the ranks' newest losses, not the extremes of the last bin's steps
    assert mx.last == pytest.approx(decaying(999, 63, 1000)) and mn.last == pytest.approx(decaying(999, 0, 1000))
    assert "min/median/max of 64 ranks" in title_text(d, 160)
    legend = [t.plain for t in legend_lines(d, 10)]
    assert legend[0].startswith("━━ max") and legend[-1] == "of 64 ranks"


def test_the_title_keeps_the_window_when_it_must_shorten():
    d = chart_data(model_with(2, 4000), columns=60)
    narrow = title_text(d, 60)
    assert len(narrow) <= 58 and "steps 0–3999" in narrow and "spread" not in narrow
    assert title_text(ChartData(), 40) == "loss (no loss reported yet)"


def test_axes_follow_the_chart_size():
    d = chart_data(model_with(2, 4000), columns=150)
    small, tall = axes_for(d, 150, 9), axes_for(d, 150, 24)
    assert 2 <= len(small.yticks) < len(tall.yticks) <= 8
    for a in (small, tall):
        logs = [math.log10(t) for t in a.yticks]
        assert len({round(y - x, 6) for x, y in zip(logs, logs[1:])}) == 1, a.yticks  # even in log space
        assert all(len(lab) <= 6 for lab in a.ylabels), a.ylabels
    assert axes_for(d, 150, 14).xlabels == ["0", "500", "1000", "1500", "2000", "2500", "3000", "3500"]


@pytest.mark.timeout(60)
@aio
async def test_the_run_screen_draws_a_long_run_on_a_log_scale_with_the_legend_beside_the_curves():
    app = DdpApp(source=ScriptSource(run_batches(2, 4000)))
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot, app)
        await pilot.press("escape")  # the verdict tab came forward at the end: back to the grid and its chart
        await settle(pilot, app)
        chart = app.screen.query_one(LossChart)
        assert chart.points == app.model.loss_version
        lines = chart.render().plain.split("\n")
        axes = chart.axes
        assert axes is not None and axes.scale == "log"
        logs = [math.log10(t) for t in axes.yticks]
        assert len({round(y - x, 6) for x, y in zip(logs, logs[1:])}) == 1 and len(logs) >= 3, axes.yticks
        assert "loss, log scale" in lines[0] and "steps 0–3999 of 4000" in lines[0]
        for label in axes.ylabels:  # each label once, left of the axis, on its own row
            assert sum(1 for ln in lines if ln.lstrip().startswith(label + "┤")) == 1, (label, lines)
        cells = canvas_cells(lines)
        assert len(cells) >= 6
        assert all(c == " " or ord(c) in BRAILLE for row in cells for c in row), "text drawn over the curves"
        assert sum(1 for row in cells for c in row if ord(c) in BRAILLE) > 100  # the curves are there
        right = next(ln for ln in lines if "┐" in ln).index("┐")
        legend = [ln[right + 1:] for ln in lines]  # right of the frame
        assert any("━━ r0" in ln for ln in legend) and any("━━ r1" in ln for ln in legend)
        assert "r0" not in "".join(cells) and "━" not in "".join(cells)
        assert [t.plain.split()[1] for t in chart.legend] == ["r0", "r1"]
        assert chart.data.series[0].color == PALETTE[0]


@pytest.mark.timeout(60)
@aio
async def test_without_colour_each_rank_is_drawn_with_its_own_mark_and_the_legend_says_which(monkeypatch):
    """NO_COLOR turns every curve the same grey: each rank's curve is drawn with its own mark, the legend shows it."""
    monkeypatch.setenv("NO_COLOR", "1")
    app = DdpApp(source=ScriptSource(run_batches(2, 400)))
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot, app)
        await pilot.press("escape")
        await settle(pilot, app)
        chart = app.screen.query_one(LossChart)
        lines = chart.render().plain.split("\n")
        drawn = "".join(canvas_cells(lines))
        assert drawn.count("o") >= 10 and drawn.count("+") > 20, drawn  # rank 0 (under rank 1 where they meet), rank 1
        assert not any(ord(c) in BRAILLE for c in drawn)
        assert [t.plain.split()[0:2] for t in chart.legend] == [["oo", "r0"], ["++", "r1"]]


def test_the_summary_curves_have_marks_that_say_which_is_which():
    d = chart_data(model_with(64, 300), columns=150)
    assert d.summary
    legend = [t.plain.split()[0:2] for t in legend_lines(d, 10, mono=True)]
    assert legend[:3] == [["^^", "max"], ["oo", "median"], ["vv", "min"]]


async def chart_height(size: tuple[int, int]) -> tuple[int, int]:
    app = DdpApp(source=ScriptSource(run_batches(2, 200), hold=True))
    async with app.run_test(size=size) as pilot:
        await settle(pilot, app)
        box = app.screen.query_one("#ranks-box").size.height
        chart = app.screen.query_one(LossChart)
        height = chart.size.height if chart.display else 0
        app.source.request_stop()
        await settle(pilot, app)
        return height, box


@pytest.mark.timeout(60)
@aio
async def test_the_chart_grows_with_the_terminal():
    small = await chart_height((160, 48))
    big = await chart_height((220, 60))
    assert big[0] > small[0] >= 12, (small, big)
    assert 0.35 <= big[0] / big[1] <= 0.42, big  # about 38 % of the ranks tab at 220x60
