"""The compact per-rank view: its decisions (order, when, go to rank, retention) and the dashboard at 64 ranks."""
from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from textual.widgets import Input, TabbedContent

from ddptui.runners import events as ev
from ddptui.tui import compact, retention
from ddptui.tui.app import DdpApp
from ddptui.tui.compact import BEHIND, FAILED, OTHER, ROOT, SLOW, STALLED, Facts, order
from ddptui.tui.model import LINES_PER_RANK, LOSS_POINTS, RunModel
from ddptui.tui.screens.run import RunScreen
from ddptui.tui.screens.zoom import ZoomScreen
from ddptui.tui.widgets.rank_pane import RankPane
from ddptui.tui.widgets.rank_table import RankTable
from tests.support.ui import ScriptSource, aio, screen_text, settle, until
from tests.support.scenes import many_ranks

pytestmark = pytest.mark.any_python


# -- the order ------------------------------------------------------------------------------------

def test_root_cause_then_failed_then_stalled_then_behind_then_slow_then_by_rank():
    rows = [Facts(0, OTHER), Facts(1, SLOW), Facts(2, BEHIND), Facts(3, STALLED), Facts(4, FAILED), Facts(5, OTHER),
            Facts(6, ROOT)]
    assert order(rows) == [6, 4, 3, 2, 1, 0, 5]


def test_user_keys_put_the_worst_first_within_a_group_and_ranks_without_a_value_last():
    rows = [Facts(0, OTHER, step=10, step_time=0.1, loss=0.5), Facts(1, OTHER, step=3, step_time=0.9, loss=2.0),
            Facts(2, OTHER), Facts(3, OTHER, step=7, step_time=0.3, loss=float("nan")), Facts(9, FAILED, step=50)]
    assert order(rows, "step") == [9, 1, 3, 0, 2]
    assert order(rows, "step_time") == [9, 1, 3, 0, 2]
    assert order(rows, "loss") == [9, 3, 1, 0, 2]  # a NaN loss is the worst
    assert order(rows, "rank") == [9, 0, 1, 2, 3]
    with pytest.raises(ValueError):
        order(rows, "colour")


def test_trouble_reads_the_rank_state_the_stall_and_the_laggards():
    m = RunModel()
    m.apply([ev.RunStarted("/r", "p", "torchrun", 6, 10, 0.0)] + [ev.RankState(r, "running", "", 0.0) for r in range(6)]
            + [ev.RankState(1, "failed", "exit 1", 1.0), ev.RankState(2, "slow", "", 1.0),
               ev.ProcessExited("rank3", (3,), 1, None, 1.0), ev.RankState(3, "exited", "", 1.0),
               ev.StallDetected((4,), (0,), 0.5, 30.0, 1.0), ev.CollectiveProgress({}, (5,), 1.0)])
    assert [compact.trouble(m.rank(r), {4}, {5}) for r in range(6)] == [OTHER, FAILED, SLOW, FAILED, STALLED, BEHIND]
    assert compact.model_order(m) == [1, 3, 4, 5, 2, 0]
    m.apply([ev.CrashVerdict("rank 3 failed first", 3, (1,), "exit 1", (), 2.0)])  # the root cause above the rest
    assert compact.root_ranks(m) == {3} and compact.model_order(m) == [3, 1, 4, 5, 2, 0]
    assert compact.status_words(m.rank(3), ROOT) == "failed (exit 1) · root cause"


facts_lists = st.lists(
    st.builds(Facts, rank=st.integers(0, 10_000), trouble=st.sampled_from([ROOT, FAILED, STALLED, BEHIND, SLOW, OTHER]),
              step=st.none() | st.integers(0, 10**6), step_time=st.none() | st.floats(0, 100, allow_nan=False),
              loss=st.none() | st.floats(allow_nan=True, allow_infinity=True)),
    max_size=60, unique_by=lambda f: f.rank)


@settings(max_examples=300, deadline=None)
@given(rows=facts_lists, by=st.sampled_from(compact.SORT_KEYS))
def test_order_is_a_permutation_grouped_by_trouble_and_sorted_within(rows, by):
    got = order(rows, by)
    assert sorted(got) == sorted(f.rank for f in rows)
    f = {x.rank: x for x in rows}
    groups = [f[r].trouble for r in got]
    assert groups == sorted(groups)  # every failed rank above every stalled one, and so on
    assert order(list(reversed(rows)), by) == got  # the input's order does not matter
    for a, b in zip(got, got[1:]):
        x, y = f[a], f[b]
        if x.trouble != y.trouble:
            continue
        if by == "rank":
            assert x.rank < y.rank
        elif by == "step" and x.step is not None and y.step is not None:
            assert x.step <= y.step
        elif by == "step_time" and x.step_time is not None and y.step_time is not None:
            assert x.step_time >= y.step_time
        elif by == "loss" and x.loss is not None and y.loss is not None and not math.isnan(y.loss):
            assert math.isnan(x.loss) or x.loss >= y.loss
        for name in ("step", "step_time", "loss"):  # a rank without the value never comes before one with it
            if by == name:
                assert not (getattr(x, name) is None and getattr(y, name) is not None)


# -- when, go to, how much is kept ------------------------------------------------------------------

def test_compact_above_16_ranks_or_when_the_grid_would_scroll():
    assert compact.want_compact(17, 100, 3)
    assert not compact.want_compact(16, 44, 4)  # 16 ranks at 160x48: 4 rows of panes fit
    assert not compact.want_compact(16, 18, 4)  # 80x24: a newest line each still fits
    assert compact.want_compact(16, 12, 4)  # fewer rows: the grid would scroll
    assert not compact.want_compact(2, 0, 1)  # not laid out yet


def test_the_chart_gives_its_rows_to_the_table_when_short():
    assert compact.compact_chart(40, 9, 64) == 9
    assert compact.compact_chart(12, 9, 64) == 0
    assert compact.compact_chart(12, 9, 2) == 9  # two rows and a header fit beside it


def test_goto_rank_answers():
    assert compact.goto_rank(" 42 ", range(64)) == (42, "")
    assert compact.goto_rank("64", range(64)) == (None, "no rank 64 in this run")
    assert compact.goto_rank("", range(64))[0] is None
    assert compact.goto_rank("x1", range(64))[0] is None


def test_retention_is_shared_out_of_a_budget_at_many_ranks():
    assert retention.kept_per_rank(16, retention.LINE_BUDGET, LINES_PER_RANK) == LINES_PER_RANK
    assert retention.kept_per_rank(64, retention.LINE_BUDGET, LINES_PER_RANK) == LINES_PER_RANK
    assert retention.kept_per_rank(1024, retention.LINE_BUDGET, LINES_PER_RANK) == 125
    assert retention.kept_per_rank(10**6, retention.LINE_BUDGET, LINES_PER_RANK) == 100
    m = RunModel()
    m.apply([ev.RunStarted("/r", "p", "torchrun", 1024, None, 0.0)])
    m.apply([ev.LogLines(r, "out", 1.0, 0.0, tuple(f"r{r} l{i}" for i in range(600))) for r in range(1024)])
    m.apply([ev.Progress(r, 600, 0.5, 1.0, "hook", tuple((i, 1.0 / (i + 1)) for i in range(600))) for r in range(1024)])
    assert sum(len(rv.lines) for rv in m.ranks.values()) == 1024 * 125 <= retention.LINE_BUDGET
    assert sum(len(rv.losses) for rv in m.ranks.values()) <= retention.LOSS_BUDGET
    assert m.ranks[7].lines[-1][2] == "r7 l599" and m.ranks[7].losses[-1] == (599, 1.0 / 600)  # the newest kept
    small = RunModel()
    small.apply([ev.RunStarted("/r", "p", "torchrun", 2, None, 0.0)])
    assert small.rank(0).lines.maxlen == LINES_PER_RANK and small.rank(0).losses.maxlen == LOSS_POINTS


# -- the dashboard at 64 ranks ----------------------------------------------------------------------


def table_rows(app) -> list[str]:
    return app.screen.query_one(RankTable).render_lines_text()


@pytest.mark.timeout(60)
@aio
async def test_64_ranks_show_the_compact_view_failed_and_laggards_on_top_and_enter_opens_a_rank():
    app = DdpApp(source=ScriptSource(many_ranks(), kind="live", hold=True))
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot, app)
        screen = app.screen
        assert isinstance(screen, RunScreen) and screen.compact_on
        assert not screen.query(RankPane)  # no pane is built for 64 ranks until asked for
        table = screen.query_one(RankTable)
        await until(pilot, lambda: table.order[:3] == [17, 40, 50], 10, "failed, behind, slow on top")
        rows = table_rows(app)
        assert rows[0].split()[:4] == ["rank↓", "node", "status", "step"]
        assert rows[1].startswith("✗ 17") and "failed (exit 1)" in rows[1] and "RuntimeError: injected" in rows[1]
        assert rows[2].startswith("< 40") and "BEHIND" in rows[2] and "3/100" in rows[2]
        assert rows[3].startswith("⚠ 50") and "slow" in rows[3]
        assert rows[4].split()[:6] == ["0", "node0", "running", "10/100", "-", "0.5"]
        assert "✗ 17" in screen_text(app) and "< 40" in screen_text(app)
        assert app.focused is table and table.cursor_rank == 17
        await pilot.press("enter")  # the failed rank's pane, on demand: its whole log
        await until(pilot, lambda: isinstance(app.screen, ZoomScreen), 10, "the zoom screen")
        head = str(app.screen.query_one("#zoom-head").render())
        assert app.screen.rank == 17 and head.startswith(" rank 17 · ") and "failed (exit 1)" in head, head
        await pilot.press("escape")
        await until(pilot, lambda: app.screen is screen, 10)
        await pilot.press("g")  # go to a rank above 9
        goto = screen.query_one("#goto", Input)
        assert goto.has_focus
        await pilot.press("4", "2", "enter")
        await until(pilot, lambda: app.focused is table and table.cursor_rank == 42, 10, "rank 42 under the cursor")
        await pilot.press("z")
        await until(pilot, lambda: isinstance(app.screen, ZoomScreen) and app.screen.rank == 42, 10)
        await pilot.press("escape")
        await until(pilot, lambda: app.screen is screen, 10)
        await pilot.press("g", "9", "9", "enter")  # no such rank: said, nothing moves
        await until(pilot, lambda: not goto.display and table.cursor_rank == 42, 10)
        await pilot.press("3")  # the digit keys still go to their rank
        await until(pilot, lambda: table.cursor_rank == 3, 10)
        await pilot.press("b", "b")  # sort by step: the failed and behind stay on top, the rest lowest step first
        await until(pilot, lambda: table.sort_by == "step_time", 10)
        await pilot.press("b")
        await until(pilot, lambda: table.sort_by == "loss", 10)
        assert table.order[:3] == [17, 40, 50] and table.order[3:6] == [63, 62, 61]  # highest loss first
        assert "loss↓" in table_rows(app)[0]
        await pilot.press("m")  # panes at any size, on demand
        await until(pilot, lambda: not screen.compact_on and len(screen.query(RankPane)) == 64, 20, "the pane grid")
        assert screen.query_one("#rank-17", RankPane).has_class("-failed")
        await pilot.press("m")
        await until(pilot, lambda: screen.compact_on and table.display, 10)
        assert screen.query_one(TabbedContent).active == "ranks"
        app.source.request_stop()


@pytest.mark.timeout(60)
@aio
async def test_a_few_ranks_keep_their_panes_and_m_shows_them_as_rows():
    src = ScriptSource([[ev.RunStarted("/runs/two", "two", "torchrun", 2, 10, 0.0), ev.RankState(0, "running", "", 0.0),
                         ev.RankState(1, "failed", "exit 1", 0.0)]], kind="live", hold=True)
    app = DdpApp(source=src)
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot, app)
        screen = app.screen
        assert not screen.compact_on and len(screen.query(RankPane)) == 2
        await pilot.press("m")
        await until(pilot, lambda: screen.compact_on, 10)
        assert screen.query_one(RankTable).order == [1, 0]
        app.source.request_stop()
