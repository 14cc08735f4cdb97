"""The dashboard's redraw caps (tui/redraw.py): what goes to the screens now, and when the rest is due."""
from __future__ import annotations

import pytest

from ddptui.tui.model import Changes
from ddptui.tui.redraw import CHART_PERIOD, VIEW_PERIOD, RedrawCap

pytestmark = pytest.mark.any_python


def lines(*ranks) -> Changes:
    return Changes(set(ranks), True, False, False)


def test_the_first_change_after_a_quiet_spell_goes_out_at_once():
    p, held = RedrawCap(), lines(0)
    out, wait = p.due(held, 100.0)
    assert out.ranks == {0} and out.lines and wait is None and not held


def test_a_flood_is_told_at_most_once_per_view_period_and_nothing_is_lost():
    p, held = RedrawCap(), Changes()
    told = []
    t = 100.0
    while t < 102.0:  # a batch every 20 ms for 2 s, each for another rank
        held.merge(lines(int(t * 50) % 16))
        out, wait = p.due(held, t)
        if out:
            told.append((t, out))
        t = round(t + 0.02, 2)
    gaps = [b[0] - a[0] for a, b in zip(told, told[1:])]
    assert len(told) <= 2.0 / VIEW_PERIOD + 1 and min(gaps) >= VIEW_PERIOD - 1e-9
    assert set().union(*(o.ranks for _, o in told)) | held.ranks == set(range(16))


def test_held_back_changes_say_when_they_are_due():
    p = RedrawCap()
    p.due(lines(0), 10.0)
    held = lines(1)
    out, wait = p.due(held, 10.1)
    assert not out and wait == pytest.approx(VIEW_PERIOD - 0.1) and held.ranks == {1}
    out, wait = p.due(held, 10.0 + VIEW_PERIOD)
    assert out.ranks == {1} and wait is None


def test_the_chart_has_its_own_slower_cap_and_its_change_waits_for_it():
    p = RedrawCap()
    out, _ = p.due(Changes({0}, False, True, False), 0.0)
    assert out.loss
    held = Changes({0}, False, True, False)
    out, wait = p.due(held, 0.3)
    assert out.ranks == {0} and not out.loss and held.loss and wait == pytest.approx(CHART_PERIOD - 0.3)
    out, wait = p.due(held, CHART_PERIOD)
    assert out.loss and not out.ranks and wait is None and not held


def test_the_end_of_a_run_goes_out_whatever_the_caps_say():
    p = RedrawCap()
    p.due(Changes({0}, True, True, False), 0.0)
    held = Changes({1}, True, True, True)
    out, wait = p.due(held, 0.01, final=True)
    assert out.run and out.loss and out.ranks == {1} and wait is None and not held
    assert p.due(Changes(), 0.02) == (Changes(), None)


def test_a_chart_shown_again_is_drawn_out_of_turn_only_within_its_cap():
    p = RedrawCap()
    assert p.chart_now(5.0)  # never drawn: at once
    assert not p.chart_now(5.0 + CHART_PERIOD / 2)
    out, wait = p.due(Changes(set(), False, True, False), 5.0 + CHART_PERIOD / 2)
    assert not out and wait == pytest.approx(CHART_PERIOD / 2)  # the out-of-turn draw counts for the cap
    assert p.chart_now(5.0 + CHART_PERIOD)
