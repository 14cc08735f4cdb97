"""The loss chart's axis decisions (tui/chart_scale.py): scale choice, even ticks, compact numbers."""
from __future__ import annotations

import pytest

import math

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from ddptui.tui.chart_scale import (LOG_RATIO, choose_scale, fmt_num, linear_ticks, log_ticks, step_label,
                                    tick_labels)

pytestmark = pytest.mark.any_python

finite = st.floats(min_value=-1e9, max_value=1e9, allow_nan=False, allow_infinity=False)
positive = st.floats(min_value=1e-15, max_value=1e9, allow_nan=False, allow_infinity=False)


def test_log_only_for_positive_losses_spanning_a_wide_range():
    assert choose_scale(1e-11, 20.0) == "log"
    assert choose_scale(0.05, 2.3) == "log"  # 46x
    assert choose_scale(0.5, 2.3) == "linear"
    assert choose_scale(1.0, LOG_RATIO) == "linear" and choose_scale(1.0, LOG_RATIO * 1.01) == "log"
    assert choose_scale(0.0, 20.0) == "linear"  # a loss of 0 has no place on a log axis
    assert choose_scale(-1.0, 20.0) == "linear"
    assert choose_scale(math.nan, math.nan) == "linear"  # nothing drawn yet
    assert choose_scale(1e-3, math.inf) == "linear"


def test_the_numbers_the_issue_names():
    assert fmt_num(0.0000000000364) == "3.6e-11"
    assert fmt_num(0.012) == "0.012"
    assert fmt_num(17.9) == "17.9"
    assert fmt_num(1234.5) == "1234" or fmt_num(1234.5) == "1235"
    assert fmt_num(123456.0) == "1.2e5"
    assert fmt_num(0.0) == "0"
    assert fmt_num(math.nan) == "nan" and fmt_num(-math.inf) == "-inf"
    assert tick_labels(linear_ticks(0.1, 17.9, 6), "linear") == ["0", "5", "10", "15", "20"]  # not 17.9 14.9 11.9 6.0
    assert tick_labels(linear_ticks(1.0, 1.05, 5), "linear") == ["1.00", "1.02", "1.04", "1.06"]
    ticks, lim = log_ticks(1e-11, 20.0, 8)
    assert tick_labels(ticks, "log") == ["1e-10", "1e-8", "1e-6", "1e-4", "0.01", "1", "100"] and lim == (1e-11, 100.0)
    assert tick_labels(log_ticks(0.9, 25.0, 8)[0], "log") == ["0.5", "1", "2", "5", "10", "20", "50"]
    assert [step_label(s) for s in (0, 4000, 99_999, 150_000, 2_500_000)] == ["0", "4000", "99999", "150k", "2.5M"]


@settings(max_examples=300, deadline=None)
@given(v=finite)
def test_compact_numbers_are_short_and_close(v):
    s = fmt_num(v)
    assert len(s) <= 9, s  # -2.2e-311 at worst
    back = float(s)
    assert math.isclose(back, v, rel_tol=0.06, abs_tol=1e-300) or abs(v) >= 1e3 and abs(back - v) <= 1, (v, s)


def _one_two_five(step: float) -> bool:
    k = math.floor(math.log10(step) + 1e-9)
    return any(math.isclose(step, m * 10.0 ** k, rel_tol=1e-6) for m in (1, 2, 5))


@settings(max_examples=400, deadline=None)
@given(a=finite, b=finite, n=st.integers(2, 12))
def test_linear_ticks_are_even_on_a_1_2_5_step_and_enclose_the_range(a, b, n):
    lo, hi = min(a, b), max(a, b)
    # a range narrower than 1e-4 of its size (1e9 +- 1000) has ticks that differ past the 6th digit: no 10-character
    # label says them, nor float32 the losses (the chart then shows the digits it can, wider)
    assume(lo == hi or hi - lo >= 1e-4 * max(abs(lo), abs(hi)))
    ticks = linear_ticks(lo, hi, n)
    assert 2 <= len(ticks) <= max(3, n)
    steps = [y - x for x, y in zip(ticks, ticks[1:])]
    assert all(math.isclose(s, steps[0], rel_tol=1e-6) for s in steps), ticks
    assert _one_two_five(steps[0]), steps[0]
    span = steps[0] * 1e-6
    assert ticks[0] <= lo + span and ticks[-1] >= hi - span
    labels = tick_labels(ticks, "linear")
    assert len(set(labels)) == len(labels), labels  # every tick reads differently
    assert max(map(len, labels)) <= 10, labels  # -1.35e-166 at worst
    assert all(math.isclose(float(lab), t, rel_tol=0.01, abs_tol=steps[0] / 10) for lab, t in zip(labels, ticks))


@settings(max_examples=300, deadline=None)
@given(a=st.integers(0, 10**7), b=st.integers(0, 10**7), n=st.integers(2, 12))
def test_step_ticks_are_whole_and_inside_the_steps_drawn(a, b, n):
    lo, hi = min(a, b), max(a, b)
    ticks = linear_ticks(lo, hi, n, integer=True, extend=False)
    assert len(ticks) <= n and all(t == int(t) for t in ticks)
    assert all(lo <= t <= hi for t in ticks)
    if hi - lo >= 10 and n >= 5:
        assert len(ticks) >= 2


@settings(max_examples=400, deadline=None)
@given(a=positive, b=positive, n=st.integers(2, 12))
def test_log_ticks_are_even_in_log_space_and_enclose_the_range(a, b, n):
    lo, hi = min(a, b), max(a, b)
    ticks, (bottom, top) = log_ticks(lo, hi, n)
    assert 2 <= len(ticks) <= n, ticks
    assert bottom <= lo * (1 + 1e-9) and top >= hi * (1 - 1e-9)
    assert all(bottom * (1 - 1e-9) <= t <= top * (1 + 1e-9) for t in ticks)
    decades = [math.log10(t) for t in ticks]
    if all(abs(d - round(d)) < 1e-9 for d in decades):  # decades: every one, or every n-th
        gaps = {round(y - x) for x, y in zip(decades, decades[1:])}
        assert len(gaps) <= 1, ticks
    else:  # 1-2-5 within the decades
        assert all(_one_two_five(t) for t in ticks), ticks
    labels = tick_labels(ticks, "log")
    assert len(set(labels)) == len(labels) and max(map(len, labels)) <= 6, labels
