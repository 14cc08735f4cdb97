"""The dashboard banner says which rank slowed down and by how much, with or without a stack sample."""
from __future__ import annotations

import pytest

from ddptui.runners import events as ev
from ddptui.tui.model import RunModel
from ddptui.tui.widgets.banner import banner_text

pytestmark = pytest.mark.any_python


def test_banner_names_the_slow_rank_with_its_numbers():
    m = RunModel()
    m.apply([ev.RunStarted("/runs/x", "slow", "torchrun", 2, 40, 1.0), ev.RankState(0, "running", "", 2.0),
             ev.RankState(1, "running", "", 2.0)])
    assert banner_text(m) == ("", "")
    m.apply([ev.RankState(1, "slow", "steps take 0.50 s, 100x its first 20 steps' 5.0 ms", 9.0)])
    assert banner_text(m) == ("-info", "SLOW: rank 1: steps take 0.50 s, 100x its first 20 steps' 5.0 ms")
    sample = ("the run slowed down (rank 1's steps take 0.50 s, 100x its first 20 steps' 5.0 ms): rank 1 is in "
              "at_step() at _faults.py:67 (calls time.sleep); rank 0 waits for it in all_reduce")
    m.apply([ev.HangVerdict(sample, (1,), (0,), {}, 9.1, "/runs/x/stacks/01-slow", "slow")])
    # the sample's sentence carries the culprit's numbers: said once, and as a slow-down, never "stuck"
    assert banner_text(m) == ("-info", "SLOW: " + sample)


def test_a_slow_sample_after_a_stall_keeps_the_stall_verdict_and_the_banner_says_slow():
    m = RunModel()
    m.apply([ev.RunStarted("/runs/x", "slow", "torchrun", 2, 40, 1.0)])
    m.apply([ev.StallDetected((1,), (0,), 3.0, 10.0, 13.0, "no step or output for 10 s"),
             ev.StacksCollected({0: "py-spy", 1: "py-spy"}, {}, 0.1, "/runs/x/stacks/01-stall", 13.1),
             ev.HangVerdict("rank 1 is stuck in wait() at t.py:3, step 4", (1,), (0,), {}, 13.2,
                            "/runs/x/stacks/01-stall", "stall")])
    stall_verdict = m.hang
    assert banner_text(m) == ("-stall", "STALL: rank 1 is stuck in wait() at t.py:3, step 4")
    m.apply([ev.StallCleared((1,), 20.0), ev.RankState(1, "running", "progressing again", 20.0)])
    assert banner_text(m) == ("", "")  # the ranks progress again: no stall banner left up
    m.apply([ev.StacksCollected({0: "py-spy", 1: "py-spy"}, {}, 0.1, "/runs/x/stacks/02-slow", 30.0, {}, "slow"),
             ev.HangVerdict("the run slowed down (rank 1's steps take 0.50 s, 100x its first 20 steps' 5.0 ms): "
                            "rank 1 is in at_step() at f.py:6 (calls time.sleep)", (1,), (0,), {}, 30.1,
                            "/runs/x/stacks/02-slow", "slow")])
    assert m.hang is stall_verdict  # the run's hang verdict is the stall's, as the engine keeps it
    assert m.stacks_verdict() is m.slow  # the Stacks tab pairs the newest stacks with the verdict read from them
    cls, text = banner_text(m)
    assert cls == "-info" and text.startswith("SLOW: the run slowed down (rank 1's") and "stuck" not in text


def test_a_stall_verdict_led_by_flight_recorder_names_the_culprits_first():
    """The finding's sentence starts with the collective; a banner cut at the screen's edge still says who."""
    m = RunModel()
    m.apply([ev.RunStarted("/runs/x", "hang", "torchrun", 2, 40, 1.0),
             ev.StallDetected((1,), (0,), 3.0, 10.0, 13.0, "no step or output for 10 s")])
    text = ("collective #16 (all_reduce, 1 tensor [5313] float32, default group): rank 0 entered it at train.py:72, "
            "rank 1 never did (its last was #15); rank 1 is stuck in at_step() at faults.py:78, step 10")
    m.apply([ev.HangVerdict(text, (1,), (0,), {}, 13.2, "/runs/x/stacks/01-stall", "stall")])
    assert banner_text(m) == ("-stall", "STALL: rank 1 · " + text)
    both = "ranks disagree at collective #11 in the default group: rank 0 called barrier, rank 1 all_reduce [161]"
    m.apply([ev.HangVerdict(both, (0, 1), (), {}, 13.3, "/runs/x/stacks/01-stall", "stall")])
    assert banner_text(m) == ("-stall", "STALL: ranks 0,1 · " + both)


def test_the_slow_banner_goes_when_the_rank_is_back_at_pace_and_the_verdict_stays():
    """A live banner says what holds now: a straggler that caught up is no longer shown SLOW while every rank moves."""
    m = RunModel()
    m.apply([ev.RunStarted("/runs/x", "slow", "torchrun", 2, 400, 1.0), ev.RankState(0, "running", "", 2.0),
             ev.RankState(1, "running", "", 2.0)])
    m.apply([ev.RankState(1, "slow", "at step 23, 9 steps behind the lead (32)", 3.0)])
    assert banner_text(m) == ("-info", "SLOW: rank 1: at step 23, 9 steps behind the lead (32)")
    m.apply([ev.RankState(1, "running", "caught up: at step 40, the lead at 40", 4.0)])
    assert banner_text(m) == ("", "")
    sample = ("the run slowed down (rank 1's steps take 0.50 s, 100x its first 20 steps' 5.0 ms): rank 1 is in "
              "at_step() at _faults.py:67 (calls time.sleep); rank 0 waits for it in all_reduce")
    m.apply([ev.HangVerdict(sample, (1,), (0,), {}, 9.1, "/runs/x/stacks/01-slow", "slow"),
             ev.RankState(1, "slow", "steps take 0.50 s, 100x its first 20 steps' 5.0 ms", 9.1)])
    assert banner_text(m) == ("-info", "SLOW: " + sample)
    m.apply([ev.RankState(1, "running", "back at pace: steps take 5.0 ms, its first 20 steps' 5.0 ms", 12.0)])
    assert banner_text(m) == ("", "") and m.slow.text == sample  # the Stacks tab keeps the sample's verdict
