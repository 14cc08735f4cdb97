"""Step time from the ranks' own clocks, the early baseline, and the slow-down rule (pure, no processes)."""
from __future__ import annotations

import pytest

from ddptui.runners.evidence.steptime import (BASE_STEPS, StepClock, median_step, pace_known, slowed_down,
                                     slowed_together, take_report, weighted_median)
from ddptui.runners.evidence.words import seconds_words

pytestmark = pytest.mark.any_python


def feed(clock: StepClock, durations, start_step=1, start=100.0, every=0.1):
    """Report `durations` (one per step) the way the rank's batching does: a line whenever `every` s passed."""
    t, n = start, start_step
    clock.reported(n, t)  # the first step: its own duration (start-up) is never known
    pending, last_line = [], t
    for d in durations:
        t, n = t + d, n + 1
        pending.append(d)
        if t - last_line >= every:
            clock.reported(n, t, pending[-64:])
            pending, last_line = [], t
    if pending:
        clock.reported(n, t, pending[-64:])
    return n, t


def test_weighted_median():
    assert weighted_median([(1.0, 1), (5.0, 1), (2.0, 1)]) == 2.0
    assert weighted_median([(1.0, 10), (100.0, 1)]) == 1.0
    assert weighted_median([]) is None


def test_batched_steps_are_timed_by_the_rank_clock_not_the_read_cadence():
    # 200 steps of 5 ms reported in 0.1 s batches: every step is 5 ms, whatever the engine's read times were
    c = StepClock()
    feed(c, [0.005] * 200)
    assert c.own and c.baseline() == pytest.approx(0.005) and c.recent() == pytest.approx(0.005)


def test_read_time_fallback_spans_every_step_of_a_read():
    # plain printed steps, read 4 times a second with ~50 steps per read: 5 ms per step, not the 0.25 s cadence
    c = StepClock()
    step = 0
    for k in range(1, 12):
        for _ in range(50):
            step += 1
            c.read(step, 10.0 + 0.25 * k)
    assert not c.own
    assert c.baseline() == pytest.approx(0.005)


def test_baseline_is_the_median_of_the_first_steps_and_ignores_one_slow_step_among_them():
    c = StepClock()
    # step 21 is already slow and lands in the same 0.1 s batch as steps 2..20: the dt list separates it
    feed(c, [0.005] * 19 + [0.5] + [0.5] * 5)
    assert c.baseline() == pytest.approx(0.005)
    assert c.recent() == pytest.approx(0.5)
    [d] = slowed_down({1: c})
    assert d.rank == 1 and d.ratio == pytest.approx(100)
    assert d.text() == "rank 1's steps take 0.50 s, 100x its first 20 steps' 5.0 ms"


def test_steps_beyond_the_dt_list_are_counted_by_their_mean():
    c = StepClock()
    c.reported(1, 0.0)
    c.reported(1001, 1.0, [0.001] * 64)  # 1000 steps in 1 s, the last 64 timed one by one
    assert sum(n for _, n in c.samples) == 1000
    assert c.baseline() == pytest.approx(0.001)


def test_a_hiccup_is_not_a_slow_down_but_three_slow_steps_over_a_second_are():
    c = StepClock()
    n, t = feed(c, [0.01] * 30)
    c.reported(n + 1, t + 0.2, [0.2])  # one slow step
    assert slowed_down({0: c}) == []
    c.reported(n + 3, t + 1.2, [0.5, 0.5])
    assert [d.rank for d in slowed_down({0: c})] == [0]


def test_no_baseline_before_enough_steps():
    c = StepClock()
    feed(c, [0.01] * (BASE_STEPS - 2))
    assert c.baseline() is None and slowed_down({0: c}) == []


def test_only_the_rank_that_slowed_is_named():
    fast, slow = StepClock(), StepClock()
    feed(fast, [0.005] * 100)
    feed(slow, [0.005] * 20 + [0.3] * 6)
    assert [d.rank for d in slowed_down({0: fast, 1: slow})] == [1]


def test_lock_step_slow_down_needs_stacks_a_lone_one_does_not():
    fast, slow0, slow1 = StepClock(), StepClock(), StepClock()
    feed(fast, [0.005] * 100)
    feed(slow0, [0.005] * 20 + [0.3] * 6)
    feed(slow1, [0.005] * 20 + [0.3] * 6)
    alone = {0: fast, 1: slow1}
    assert not slowed_together(slowed_down(alone), alone)  # rank 0 kept its pace: rank 1 is named as is
    both = {0: slow0, 1: slow1}
    assert slowed_together(slowed_down(both), both)  # lock-step: both slowed, stacks must tell
    assert not slowed_together(slowed_down({1: slow1}), {1: slow1})  # one rank left: it is the slow one


def test_a_rank_that_has_not_reported_its_slow_steps_yet_is_not_one_that_kept_its_pace():
    """Lock-step ranks report 0.1 s apart: rank 0's slow steps may be in while rank 1's line with the same steps is
    not yet. Judged then, rank 1 looked like it kept its pace and rank 0 was named alone (a flaky e2e failure)."""
    lead, late = StepClock(), StepClock()
    n, t = feed(lead, [0.005] * 20 + [0.5] * 4)  # its window holds 4 slow steps (>= 3 steps and 1 s)
    feed(late, [0.005] * 20 + [0.5] * 1)  # the same run, one line behind: one slow step in so far
    clocks = {0: lead, 1: late}
    downs = slowed_down(clocks)
    assert [(d.rank, d.step) for d in downs] == [(0, n)] and late.timed_to < n
    assert not pace_known(downs, clocks)  # rank 1 has not been timed as far: together or alone is not known yet
    late.reported(n, t, [0.5] * 3)  # its line arrives: the same steps, as slow
    downs = slowed_down(clocks)
    assert pace_known(downs, clocks) and slowed_together(downs, clocks)


def test_a_rank_that_kept_its_pace_past_the_slowed_one_is_known_at_once():
    fast, slow = StepClock(), StepClock()
    feed(fast, [0.005] * 100)
    feed(slow, [0.005] * 20 + [0.3] * 6)
    clocks = {0: fast, 1: slow, 2: StepClock()}  # rank 2 never timed: not waited for
    downs = slowed_down(clocks)
    assert pace_known(downs, clocks) and not slowed_together(downs, clocks)


def test_microsecond_jitter_is_not_a_slow_down():
    c = StepClock()
    feed(c, [0.00001] * 30 + [0.00005] * 200000, every=0.1)
    assert slowed_down({0: c}) == []


def test_report_without_stamps_falls_back_to_read_time():
    c = StepClock()
    take_report(c, {"k": "loss", "steps": [[1, 0.5]]}, [1], 5.0)
    take_report(c, {"k": "loss", "steps": [[2, 0.5], [3, 0.4]]}, [2, 3], 5.5)
    take_report(c, {"k": "loss", "steps": [[4, 0.5]]}, [4], 6.0)
    assert not c.own and list(c.samples) == [(0.25, 2)]
    take_report(c, {"k": "step", "step": 9, "at": [9, 50.0], "dt": [0.01]}, [9], 6.1)
    assert c.own and list(c.samples) == [(0.01, 1)]  # the rank's clock replaces read-time estimates
    take_report(c, {"k": "step", "step": 10, "at": ["x", 1]}, [10], 6.2)  # a malformed stamp: read time
    assert list(c.samples) == [(0.01, 1)]


def test_restarted_count_is_not_a_negative_span():
    c = StepClock()
    c.reported(50, 10.0)
    c.reported(3, 11.0, [0.01, 0.01])
    assert list(c.samples) == [(0.01, 1), (0.01, 1)]


def test_median_step_across_ranks():
    a, b = StepClock(), StepClock()
    feed(a, [0.01] * 50)
    feed(b, [0.02] * 10)
    assert median_step([a, b]) == pytest.approx(0.01)
    assert median_step([StepClock()]) is None


def test_seconds_words():
    assert [seconds_words(x) for x in (25, 0.5, 0.05, 0.005, 0.00002)] == ["25 s", "0.50 s", "50 ms", "5.0 ms", "20 us"]


# ---- one step time: the engine's, on every Progress event and in the summary ----------------------------------
def test_progress_and_summary_carry_the_engines_step_time_that_the_slow_down_rule_reads():
    """A rank stamping its reports is timed by its own clock: 20 ms a step, though its lines are read 0.5 s apart.
    Every Progress says the figure the rank's StepClock holds; summary.json says its pace over the run."""
    import json

    from ddptui.runners import events as ev
    from tests.support.judge import hello, make, of, say
    j = make()
    hello(j, 0)
    got, t, step = [], 100.0, 0
    for k in range(1, 9):  # every 0.5 s a line of 25 steps of 20 ms by the rank's clock
        step += 25
        t += 0.5
        rep = {"k": "step", "r": 0, "step": step, "at": [step, t], "dt": [0.02] * 25}
        got += of(say(j, 0, 1.0 + 0.5 * k, "@ddptui " + json.dumps(rep)), ev.Progress)
        got += of(j.progress(), ev.Progress)
    clock = j.state.tracks[0].clock
    assert got and got[-1].step_time == pytest.approx(0.02) == clock.recent()
    assert all(e.step_time is None or e.step_time == pytest.approx(0.02) for e in got)
    ranks = j.summary("ok", 0, "runs/x", 4.0, 0.1, [], [])["ranks"]
    assert ranks[0]["step_time_s"] == pytest.approx(0.02) and ranks[1]["step_time_s"] is None


def test_a_record_without_the_engines_step_time_replays_as_false():
    from ddptui.runners import events as ev
    old = {"kind": "progress", "rank": 0, "step": 5, "loss": None, "wall": 1.0, "source": "hook", "losses": []}
    assert ev.from_json(old).step_time is False
    assert ev.from_json({**old, "step_time": None}).step_time is None
    assert ev.from_json({**old, "step_time": 0.25}).step_time == 0.25


def test_read_whole_times_each_read_against_the_one_before():
    """A Progress event is one whole read: it is timed as it arrives, not once the next read comes."""
    c = StepClock()
    c.read_whole(10, 1.0)
    assert c.step_time() is None and c.mean() is None
    c.read_whole(20, 2.0)
    assert c.step_time() == pytest.approx(0.1)
    c.read_whole(25, 2.0)  # read with the previous one: it starts the next span, its own steps stay untimed
    c.read_whole(35, 4.0)
    assert c.samples[-1] == (pytest.approx(0.2), 10) and c.mean() == pytest.approx(3.0 / 20)
