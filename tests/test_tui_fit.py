"""The run screen's row split between rank panes and the loss chart (pure decisions of tui/fit.py)."""
from __future__ import annotations

import pytest

from ddptui.tui.fit import CHART_MIN, PANE_FRAME, TAIL_MIN, Fit, chart_rows, fit

pytestmark = pytest.mark.any_python


def tail_rows(box: int, grid_rows: int, f: Fit) -> int:
    """Log rows of the smallest pane under fit f (panes share the grid's rows evenly, or have f.row)."""
    pane = f.row if f.row is not None else (box - f.chart) // grid_rows
    return pane - PANE_FRAME - (1 if f.bars else 0)


def test_plenty_of_rows_changes_nothing():
    assert fit(44, 1, 12) == Fit(12, True, None)  # 2 ranks at 160x48
    assert fit(44, 4, 12) == Fit(12, True, None)  # 16 ranks at 160x48
    assert fit(20, 1, 12) == Fit(12, True, None)  # 2 ranks at 80x24


def test_the_chart_shrinks_first_then_the_bars_go_then_the_chart_then_the_grid_scrolls():
    assert fit(24, 2, 12) == Fit(10, True, None)  # 4 ranks at 80x28
    assert fit(22, 2, 12) == Fit(10, False, None)
    assert fit(20, 2, 12) == Fit(0, True, None)  # 4 ranks at 80x24: four readable panes, not a chart over 1-line panes
    assert fit(36, 4, 12) == Fit(12, False, None)  # 16 ranks at 120x40
    assert fit(20, 4, 12) == Fit(0, True, None)  # 16 ranks at 80x24
    assert fit(18, 4, 12) == Fit(0, False, None)  # the same with a two-row banner
    assert fit(20, 6, 8) == Fit(0, False, PANE_FRAME + TAIL_MIN)  # 32 ranks at 80x24


def test_every_pane_keeps_its_newest_line_and_the_chart_is_never_a_sliver():
    for grid_rows in (1, 2, 3, 4, 5, 6, 8):
        for box in range(4, 60):
            pref = chart_rows(grid_rows * 4, box)
            f = fit(box, grid_rows, pref)
            assert tail_rows(box, grid_rows, f) >= TAIL_MIN, (box, grid_rows, f)
            assert f.chart == 0 or CHART_MIN <= f.chart <= pref, (box, grid_rows, f)
            if f.row is None:
                assert f.chart + grid_rows * (PANE_FRAME + TAIL_MIN) <= box, (box, grid_rows, f)
            else:
                assert grid_rows * (PANE_FRAME + TAIL_MIN) > box, (box, grid_rows, f)  # scroll only when nothing fits


def test_panes_keep_tail_want_rows_whenever_the_box_has_them_the_chart_goes_first():
    from ddptui.tui.fit import BAR, TAIL_WANT
    for grid_rows in (1, 2, 3, 4):
        for box in range(4, 80):
            f = fit(box, grid_rows, 12)
            if box >= grid_rows * (PANE_FRAME + TAIL_WANT):
                assert tail_rows(box, grid_rows, f) >= TAIL_WANT, (box, grid_rows, f)
            if f.chart == 0 and box >= grid_rows * (PANE_FRAME + BAR + TAIL_WANT) + CHART_MIN:
                raise AssertionError(f"chart hidden though it fits beside readable panes: {(box, grid_rows, f)}")


def test_no_ranks_yet_keeps_the_chart():
    assert fit(20, 0, 12) == Fit(12, True, None)


def test_the_chart_takes_a_share_of_a_big_screen():
    from ddptui.tui.fit import CHART_MAX
    assert chart_rows(2, 19) == 12  # 80x24: as tall as it always was
    assert chart_rows(2, 44) == 17  # 160x48
    assert chart_rows(2, 56) == 21  # 220x60: 38 % of the ranks tab
    assert chart_rows(64, 56) == 14  # many ranks: their panes (or the compact table) need the rows
    assert chart_rows(2, 300) == CHART_MAX
    for ranks in (1, 2, 8, 16, 17, 64):
        heights = [chart_rows(ranks, box) for box in range(4, 200)]
        assert heights == sorted(heights), ranks  # never shorter on a taller screen
    assert fit(56, 1, chart_rows(2, 56)) == Fit(21, True, None)  # 2 ranks at 220x60
    assert fit(56, 4, chart_rows(16, 56)) == Fit(21, True, None)  # 16 ranks at 220x60: panes keep TAIL_WANT rows
    assert fit(44, 4, chart_rows(16, 44)) == Fit(16, True, None)  # 16 ranks at 160x48: the chart gives up a row
