"""The dashboard banner says which rank slowed down and by how much, with or without a stack sample."""
from __future__ import annotations

from runners import events as ev
from tui.model import RunModel
from tui.widgets.banner import banner_text


def test_banner_names_the_slow_rank_with_its_numbers():
    m = RunModel()
    m.apply([ev.RunStarted("/runs/x", "slow", "torchrun", 2, 40, 1.0), ev.RankState(0, "running", "", 2.0),
             ev.RankState(1, "running", "", 2.0)])
    assert banner_text(m) == ("", "")
    m.apply([ev.RankState(1, "slow", "steps take 0.50 s, 100x its first 20 steps' 5.0 ms", 9.0)])
    assert banner_text(m) == ("-info", "SLOW: rank 1: steps take 0.50 s, 100x its first 20 steps' 5.0 ms")
    m.apply([ev.HangVerdict("the run slowed down: rank 1 is stuck in time.sleep", (1,), (0,), {}, 9.1,
                            "/runs/x/stacks/01-slow", "slow")])
    assert banner_text(m) == ("-info", "SLOW: rank 1: steps take 0.50 s, 100x its first 20 steps' 5.0 ms · "
                                       "the run slowed down: rank 1 is stuck in time.sleep")
