"""The whole-run history of a rank's series: bounded however long the run, first / last / extremes kept, attempts apart."""
from __future__ import annotations

import math
import random
from collections import deque

import pytest

from ddptui.tui.history import Segmented, Thinned, extremes

pytestmark = pytest.mark.any_python


def test_thinned_stays_bounded_and_keeps_first_last_and_extremes():
    rng = random.Random(7)
    t = Thinned(cap=64)
    pts = [(s, 2.0 / (1 + s * 0.001) + rng.uniform(-0.01, 0.01)) for s in range(1, 200_001)]
    pts[123_456] = (123_457, 50.0)  # a spike in the middle of a long run
    pts[77_777] = (77_778, -3.0)  # and a dip
    for x, y in pts:
        t.add(x, y)
    kept = t.points()
    assert len(t) <= 64 and len(kept) <= 4 * 64
    assert kept[0] == pts[0] and kept[-1] == pts[-1]
    assert (123_457, 50.0) in kept and (77_778, -3.0) in kept
    assert max(y for _, y in kept) == 50.0 and min(y for _, y in kept) == -3.0
    xs = [x for x, _ in kept]
    assert xs == sorted(xs) and all(isinstance(x, int) for x in xs)
    assert t.count == len(pts) and t.width >= len(pts) // 64


def test_a_spike_or_a_dip_anywhere_survives_every_merge():
    for at in range(0, 1000, 37):  # in the left or the right bucket of each pairwise merge
        t, u = Thinned(cap=8), Thinned(cap=8)
        t.extend([(s, 9.0 if s == at else 1.0) for s in range(1000)])
        u.extend([(s, -9.0 if s == at else 1.0) for s in range(1000)])
        assert (at, 9.0) in t.points() and (at, -9.0) in u.points(), at


def test_thinned_short_series_is_kept_whole():
    t = Thinned(cap=64)
    pts = [(s, float(s % 5)) for s in range(50)]
    t.extend(pts)
    assert t.points() == pts and t.width == 1


def test_thinned_counts_nan_and_inf_apart():
    t = Thinned(cap=8)
    t.extend([(0, 1.0), (1, math.nan), (2, math.inf), (3, 0.5)])
    assert t.points() == [(0, 1.0), (3, 0.5)] and t.not_finite == 2


def test_segmented_splits_at_each_attempt_in_both_windows():
    s = Segmented(deque(maxlen=100), cap=16)
    s.add([(i, 3.0 - i / 1000) for i in range(0, 730)], attempt=0)  # crashed at step 729
    s.add([(i, 2.5 - i / 1000) for i in range(500, 600)], attempt=1)  # resumed from the checkpoint of step 500
    whole = s.whole_segments()
    assert [a for a, _ in whole] == [0, 1]
    assert whole[0][1][0] == (0, 3.0) and whole[0][1][-1][0] == 729
    assert whole[1][1][0][0] == 500 and whole[1][1][-1][0] == 599
    assert s.dropped()
    recent = s.recent_segments()  # the newest 100 points: all of attempt 1
    assert [a for a, _ in recent] == [1] and recent[0][1][0][0] == 500
    s.add([(600, 1.0)], attempt=1)
    recent = s.recent_segments()
    assert [a for a, _ in recent] == [1] and len(recent[0][1]) == 100


def test_segmented_recent_window_spanning_a_restart_from_step_zero():
    s = Segmented(deque(maxlen=50), cap=16)
    s.add([(i, 1.0) for i in range(40)], attempt=0)
    s.add([(i, 2.0) for i in range(20)], attempt=1)  # from step 0 again
    recent = s.recent_segments()
    assert [(a, len(p)) for a, p in recent] == [(0, 30), (1, 20)]
    assert recent[0][1][0] == (10, 1.0) and recent[1][1][0] == (0, 2.0)


def test_points_leaving_the_recent_window_are_folded_with_each_attempt_apart():
    s = Segmented(deque(maxlen=10), cap=4)
    plan = [(0, range(0, 300)), (1, range(100, 400)), (2, range(0, 50))]  # resumed from a checkpoint, then from 0
    for attempt, steps in plan:
        for i in steps:  # one point an event, as a Progress of one loss brings
            s.add([(i, 99.0 if (attempt, i) == (1, 250) else 1.0 + attempt + i / 1000)], attempt)
    assert all(len(t) <= 4 for t in s.whole) and len(s.recent) == 10
    assert s.folded >= s.count - 10 and s.count == 650
    whole = s.whole_segments()
    assert [a for a, _ in whole] == [0, 1, 2]
    for (attempt, steps), (_, pts) in zip(plan, whole, strict=True):
        assert pts[0][0] == steps[0] and pts[-1][0] == steps[-1], attempt
        assert [x for x, _ in pts] == sorted(x for x, _ in pts)
    assert (250, 99.0) in whole[1][1]
    assert [(a, p[0][0], p[-1][0]) for a, p in s.recent_segments()] == [(2, 40, 49)]


def test_extremes_keep_each_stretchs_spike():
    pts = [(i, 1.0) for i in range(10_000)]
    pts[6_543] = (6_543, 7.0)
    out = extremes(pts, 100)
    assert len(out) <= 100 and out[0] == pts[0] and out[-1] == pts[-1] and (6_543, 7.0) in out
    assert extremes(pts[:50], 100) == pts[:50]
