"""The chart's views: the whole run beside the recent window (w), each rank's step time (l), attempts as segments."""
from __future__ import annotations

import json
import math

import pytest

from ddptui.runners import events as ev
from ddptui.tui.app import DdpApp
from ddptui.tui.chart_scale import segment_offsets, segmented_ticks
from ddptui.tui.model import RunModel
from ddptui.tui.replay import ReplaySource
from ddptui.tui.synthetic import SyntheticSource
from ddptui.tui.widgets.loss_chart import LossChart, axes_for, chart_data, legend_lines, step_chart_data, title_text
from tests.support.ui import BRAILLE, ScriptSource, aio, canvas_cells, settle, until

pytestmark = pytest.mark.any_python

T0 = 1_700_000_000.0


def loss(step: int, rank: int = 0) -> float:
    return 3.0 / (1 + step * 0.01) + 0.01 * rank


def progress(rank: int, steps: range, wall: float, step_time: float | None | bool = False, spike_at: int = -1):
    return ev.Progress(rank, steps[-1], None, wall, "hook",
                       tuple((s, 40.0 if s == spike_at else loss(s, rank)) for s in steps), step_time=step_time)


def long_run(ranks: int = 2, steps: int = 12_000, per: int = 500, spike_at: int = 2_345) -> list[list[ev.Event]]:
    """A run longer than the recent window (4,000 points a rank), one loss spike early on, in engine-sized batches."""
    out = [[ev.RunStarted("/runs/long", "long", "torchrun", ranks, steps, T0)]
           + [ev.RankState(r, "running", "", T0) for r in range(ranks)]]
    for i, start in enumerate(range(0, steps, per)):
        out.append([progress(r, range(start, start + per), T0 + 1 + i, 0.1 + 0.05 * r, spike_at)
                    for r in range(ranks)])
    return out


def restarted_run(ranks: int = 2, resume: int = 500, crash: int = 730, end: int = 1_000) -> list[list[ev.Event]]:
    """Attempt 0 trains to step `crash` and fails; torchrun restarts the workers, which resume at step `resume`."""
    out = [[ev.RunStarted("/runs/restart", "restart", "torchrun", ranks, end, T0), ev.AttemptStarted(0, "", T0)]]
    w = T0 + 1
    for start in range(0, crash, 100):
        out.append([progress(r, range(start, min(crash, start + 100)), w, 0.2) for r in range(ranks)])
        w += 20
    out.append([ev.AttemptEnded(0, "failed", "rank 1 crashed (exit 1)", w),
                ev.AttemptStarted(1, "torchrun restarted the worker group (2/3 restarts left)", w + 1)])
    w += 5
    for start in range(resume, end, 100):
        out.append([progress(r, range(start, min(end, start + 100)), w, 0.1) for r in range(ranks)])
        w += 10
    return out


def folded(batches) -> RunModel:
    m = RunModel()
    for b in batches:
        m.apply(b)
    return m


# -- the model: series kept, attempts split, the pace of the attempt now -----------------------------------------------
def test_the_model_keeps_the_whole_run_thinned_beside_the_recent_window():
    m = folded(long_run())
    rv = m.ranks[0]
    assert len(rv.losses) == 4000 and rv.losses[0][0] == 8000  # the recent window: the newest 4,000 points
    whole = rv.loss_series.whole_segments()
    # bounded: the thinned buckets, then what the recent window holds and has not let go yet
    assert len(whole) == 1 and all(len(t) <= m.whole_kept for t in rv.loss_series.whole)
    assert len(whole[0][1]) <= 4 * m.whole_kept + len(rv.losses)
    pts = whole[0][1]
    assert pts[0] == (0, loss(0)) and pts[-1] == (11_999, loss(11_999)) and (2_345, 40.0) in pts
    # the step-time series: one point per new step read, the engine's figure
    assert [y for _, y in rv.step_series.whole_segments()[0][1]] == [0.1] * 24
    assert m.ranks[1].step_times[-1] == (11_999, pytest.approx(0.15))


def test_step_times_of_an_older_record_come_from_its_read_times():
    m = RunModel()
    m.apply([ev.RunStarted("/r", "p", "torchrun", 1, None, T0)])
    for i in range(1, 8):  # a step every 0.5 s, told without the engine's step time (step_time False)
        m.apply([ev.Progress(0, i, 1.0, T0 + 0.5 * i, "parsed")])
    times = [y for _, y in m.ranks[0].step_times]
    assert times and all(t == pytest.approx(0.5) for t in times)
    # a run that reports no loss still moves the straggler view (its own version), not the loss chart
    m.take_changes()
    losses, steps = m.loss_version, m.step_version
    m.apply([ev.Progress(0, 8, None, T0 + 4.0, "hook", step_time=0.5)])
    assert m.step_version == steps + 1 and m.loss_version == losses and m.take_changes().loss


def test_an_attempt_splits_the_series_and_restarts_the_pace():
    m = folded(restarted_run())
    assert m.attempt == 1 and m.resumed_at == {1: 500} and m.attempts[0]["status"] == "failed"
    segs = m.ranks[0].loss_series.recent_segments()
    assert [(a, p[0][0], p[-1][0]) for a, p in segs] == [(0, 0, 729), (1, 500, 999)]
    assert [a for a, _ in m.ranks[1].step_series.whole_segments()] == [0, 1]
    # the pace is attempt 1's: its step (999, not the 729 of attempt 0), its step time
    assert m.ranks[0].step == 999 and m.ranks[0].step_time == 0.1
    m2 = folded(restarted_run(end=600))  # attempt 1 still behind where attempt 0 got to
    assert m2.ranks[0].step == 599, "a step lower than attempt 0's is the rank's step now, not ignored"
    pace = m2.pace()
    assert pace is not None and pace.step_time == 0.1 and pace.eta == pytest.approx((600 - 599) * 0.1)


# -- what is drawn ---------------------------------------------------------------------------------------------------
def test_the_whole_run_view_shows_every_step_and_the_spike_the_recent_window_lost():
    m = folded(long_run())
    recent, whole = chart_data(m, columns=150), chart_data(m, columns=150, whole=True)
    assert min(recent.series[0].xs) == 8000 and max(recent.series[0].ys) < 1
    assert whole.whole and min(whole.series[0].xs) == 0 and max(whole.series[0].xs) == 11_999
    assert max(whole.series[0].ys) == 40.0 and all(len(s.xs) <= 300 for s in whole.series)
    assert "w: whole run" in title_text(recent, 200) and "last 4000" in title_text(recent, 200)
    assert title_text(whole, 200).startswith("loss, whole run, log scale · steps 0–11999 of 12000")
    assert "lows and highs kept" in title_text(whole, 200) and "w: recent" in title_text(whole, 200)
    short = folded(long_run(steps=1000))
    assert chart_data(short).hint == "", "no key to tell while the window holds the whole run"


def test_two_attempts_are_two_segments_side_by_side():
    m = folded(restarted_run())
    d = chart_data(m, columns=150)
    assert [s.name for s in d.series] == ["r0", "r0", "r1", "r1"]  # a curve per attempt: no line joins them
    a0, a1 = d.series[0], d.series[1]
    assert (a0.xs[0], a0.xs[-1]) == (0, 729) and (a1.xs[0], a1.xs[-1]) == (730, 1229)  # attempt 1 drawn after
    assert d.spans == ((0, 729, 0), (500, 999, 230)) and d.breaks == (729.5,)
    assert "2 attempts (attempt 1 from step 500)" in title_text(d, 200) and "steps 0–729 | 500–999" in d.steps
    axes = axes_for(d, 150, 16)
    assert axes.xlabels[0] == "0" and "500" in axes.xlabels[axes.xticks.index(min(x for x in axes.xticks if x >= 730)):]
    assert axes.xticks == sorted(axes.xticks)
    assert [t.plain.split()[1] for t in legend_lines(d, 10)] == ["r0", "r1"]
    st = step_chart_data(m, columns=150)
    # a step time per Progress that brought new steps: each attempt's from its first read (step 99; 599 resumed)
    assert [s.name for s in st.series] == ["r0", "r0", "r1", "r1"] and st.spans == ((99, 729, 0), (599, 999, 131))
    assert st.series[0].ys[-1] == 0.2 and st.series[1].ys[0] == 0.1


def test_segment_layout_and_ticks():
    assert segment_offsets([(0, 729), (500, 999)]) == [0, 230]
    assert segment_offsets([(0, 100), (0, 50), (10, 20)]) == [0, 101, 142]
    assert segment_offsets([(0, 100), (101, 200)]) == [0, 0]  # resumed where it stopped: no gap
    assert segment_offsets([(0, 100), (300, 400)]) == [0, 0]  # a jump forward keeps its steps' place
    xt, labels = segmented_ticks([(0, 729), (500, 999)], [0, 230], 120, 7)
    assert xt == sorted(xt) and labels[0] == "0" and "500" in labels
    assert all(b - a >= 7 * 1229 / 110 for a, b in zip(xt, xt[1:], strict=False)), "labels never overlap"


def test_the_straggler_view_at_two_and_at_64_ranks():
    two = RunModel()
    two.apply([ev.RunStarted("/r", "p", "torchrun", 2, 100, T0)])
    for i in range(1, 40):
        two.apply([ev.Progress(r, i, 1.0, T0 + i, "hook", step_time=0.1 * (r + 1)) for r in range(2)])
    d = step_chart_data(two, columns=120)
    assert [s.name for s in d.series] == ["r0", "r1"] and d.series[1].ys[-1] == 0.2 and not d.stragglers
    assert title_text(d, 120).startswith("step time (s) · steps 1–39 of 100")
    many = RunModel()
    many.apply([ev.RunStarted("/r", "p", "torchrun", 64, None, T0)])
    slow = {17: 0.9, 40: 0.6, 3: 0.5}
    for i in range(1, 60):
        many.apply([ev.Progress(r, i, 1.0, T0 + i, "hook", step_time=slow.get(r, 0.2 + 0.001 * (r % 5)))
                    for r in range(64)])
    d = step_chart_data(many, columns=150)
    assert [s.name for s in d.series] == ["r17", "r40", "r3", "median"] and d.stragglers == 3
    median = d.series[-1]
    assert all(y == pytest.approx(0.202) for y in median.ys) and len(median.xs) >= 30
    assert "the 3 slowest of 64 ranks and the median" in title_text(d, 160)
    legend = [t.plain for t in legend_lines(d, 10)]
    assert legend[0].startswith("━━ r17") and "0.9" in legend[0] and legend[-1] == "of 64 ranks"


# -- the run screen --------------------------------------------------------------------------------------------------
def chart_title(chart: LossChart) -> str:
    return chart.render().plain.split("\n")[0].strip()


@pytest.mark.timeout(60)
@aio
async def test_keys_switch_the_chart_and_a_finished_long_run_shows_the_whole_run():
    batches = long_run()
    live = DdpApp(source=ScriptSource(batches, kind="live", hold=True))
    async with live.run_test(size=(160, 48)) as pilot:
        await settle(pilot, live)
        chart = live.screen.query_one(LossChart)
        assert not chart.data.whole and "w: whole run" in chart_title(chart)  # a live run: the recent window
        await pilot.press("w")
        await until(pilot, lambda: chart.data.whole, 10, "the whole run after w")
        assert "whole run" in chart_title(chart) and min(chart.data.series[0].xs) == 0
        await pilot.press("l")
        await until(pilot, lambda: chart.data.what == "step time", 10, "the step times after l")
        title = chart_title(chart)
        assert title.startswith("step time, whole run (s)"), title
        assert [t.plain.split()[1] for t in chart.legend] == ["r0", "r1"]
        await pilot.press("w", "l")
        await until(pilot, lambda: chart.data.what == "loss" and not chart.data.whole, 10, "back to the recent losses")
        live.source.request_stop()
        await settle(pilot, live)
    ended = DdpApp(source=ScriptSource(batches + [[ev.RunFinished("ok", 0, "", T0 + 100)]]))
    async with ended.run_test(size=(160, 48)) as pilot:
        await settle(pilot, ended)
        await pilot.press("escape")  # the verdict tab came forward at the end
        await settle(pilot, ended)
        chart = ended.screen.query_one(LossChart)
        assert chart.data.whole and chart.data.hi == 40.0, chart.data.steps  # the spike of step 2,345
        assert "loss, whole run" in chart_title(chart)


def write_record(run_dir, batches) -> None:
    run_dir.mkdir()
    with open(run_dir / "events.jsonl", "w") as f:
        for b in batches:
            for e in b:
                f.write(json.dumps(e.to_json()) + "\n")
    (run_dir / "summary.json").write_text(json.dumps({"status": "failed"}))


@pytest.mark.timeout(60)
@aio
async def test_a_replayed_run_with_two_attempts_shows_two_segments(tmp_path):
    run = tmp_path / "restart"
    write_record(run, restarted_run(end=900) + [[ev.RunFinished("ok", 0, str(run / "summary.json"), T0 + 999)]])
    app = DdpApp(source=ReplaySource(run))
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot, app)
        await pilot.press("escape")
        await settle(pilot, app)
        chart = app.screen.query_one(LossChart)
        await until(pilot, lambda: chart.points == app.model.loss_version, 10, "the chart to draw the record")
        assert len(chart.data.spans) == 2 and len(chart.data.breaks) == 1
        lines = chart.render().plain.split("\n")
        assert "2 attempts (attempt 1 from step 500)" in lines[0], lines[0]
        cells = canvas_cells(lines)
        col = next(i for i in range(len(cells[0])) if sum(1 for row in cells if row[i] == "│") >= len(cells) - 2)
        assert any(ord(row[col - 2]) in BRAILLE for row in cells) and any(ord(row[col + 2]) in BRAILLE for row in cells)
        head = str(app.screen.query_one("#run-head").render())
        assert "attempt 1 from step 500" in head
        await pilot.press("l")
        await until(pilot, lambda: chart.data.what == "step time", 10, "the step times")
        assert len(chart.data.spans) == 2 and chart.data.series[0].ys[0] == 0.2


@pytest.mark.timeout(60)
@aio
async def test_the_straggler_view_of_a_synthetic_run_of_64_ranks():
    """Synthetic Progress carries no engine step time: the model times the steps by their read times."""
    app = DdpApp(source=SyntheticSource(ranks=64, lines_per_s=5, seconds=2.5, collectives=False))
    async with app.run_test(size=(200, 60)) as pilot:
        await until(pilot, lambda: app.model.finished is not None, 30, "the synthetic run to end")
        await settle(pilot, app)
        await pilot.press("escape")
        await pilot.press("l")
        chart = app.screen.query_one(LossChart)
        await until(pilot, lambda: chart.data.what == "step time" and chart.data.series, 10, "the straggler view")
        names = [s.name for s in chart.data.series]
        assert names[-1] == "median" and len({n for n in names if n != "median"}) == 3
        assert chart.data.stragglers == 3 and all(0 < y < 5 and math.isfinite(y) for s in chart.data.series
                                                  for y in s.ys)
        assert "3 slowest of 64 ranks" in chart_title(chart)
