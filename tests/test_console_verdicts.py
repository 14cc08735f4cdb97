"""The headless console labels a slow-down as slow and a stall as stall, and says when a stall is over."""
from __future__ import annotations

import pytest

import io

from ddptui.runners import events as ev
from ddptui.tui.console import Console

pytestmark = pytest.mark.any_python

SAMPLE = ("the run slowed down (rank 1's steps take 0.51 s, 170x its first 20 steps' 3.0 ms): rank 1 is in at_step() "
          "at _faults.py:67 (calls time.sleep); rank 0 waits for it in all_reduce")


def _summary(**parts) -> ev.RunFinished:
    s = {"profile": "slow", "runner": "torchrun", "world_size": 2, "duration_s": 9.0, "status": "ok", "ranks": {},
         "run_dir": "/runs/x", **parts}
    return ev.RunFinished(s["status"], 0, "/runs/x/summary.json", 10.0, s)


def test_summary_says_a_slow_down_under_slow_and_a_stall_under_stall():
    slow = {"ranks": [1], "text": "rank 1's steps take 0.51 s, 170x its first 20 steps' 3.0 ms", "wall": 5.0,
            "verdict": {"text": SAMPLE, "culprits": [1], "waiting": [0], "where": {}, "stacks": "/runs/x/stacks/01-slow"}}
    text = Console(io.StringIO(), color=False).render_summary(_summary(slow=slow, hang=None))
    assert f"\nslow: {slow['text']}\nslow: {SAMPLE}\n" in text and "stall:" not in text
    hang = {"text": "rank 1 is stuck in wait() at t.py:3, step 4; rank 0 waits in all_reduce since 10:00:00",
            "culprits": [1], "waiting": [0], "where": {}}
    text = Console(io.StringIO(), color=False).render_summary(_summary(slow=slow, hang=hang))
    assert f"\nstall: {hang['text']}\n" in text and f"\nslow: {SAMPLE}\n" in text


def test_stream_labels_the_sample_slow_and_says_when_a_stall_ends():
    out = io.StringIO()
    Console(out, color=False).handle([ev.HangVerdict(SAMPLE, (1,), (0,), {}, 5.0, "/runs/x/stacks/01-slow", "slow"),
                                      ev.StallCleared((1,), 6.0), ev.StallCleared((0, 1), 7.0)])
    lines = out.getvalue().splitlines()
    assert lines[0].endswith(f"[slow] {SAMPLE}")
    assert lines[1].endswith("[ddptui] stall over: rank 1 progressing again")
    assert lines[2].endswith("[ddptui] stall over: ranks 0, 1 progressing again")


def test_a_record_whose_slow_entry_is_malformed_is_reported_not_replayed_into_the_console():
    from ddptui.runners.evidence.eventcheck import problem
    ok = _summary(slow={"ranks": [1], "text": "rank 1's steps take 0.51 s", "verdict": {"text": SAMPLE}})
    assert problem(ok) is None
    assert problem(_summary(slow="slow")) == "summary.slow: expected dict | NoneType, got str"
    assert problem(_summary(slow={"ranks": [1], "text": "x", "verdict": "y"})).startswith("summary.slow.verdict")


def test_a_record_whose_own_exit_entry_is_malformed_is_reported_not_replayed():
    from ddptui.runners.evidence.eventcheck import problem
    ok = {"text": "rank 0 exited with status 3, the program's own", "ranks": [0], "codes": {"0": 3}}
    assert problem(_summary(own_exit=ok)) is None and problem(_summary(own_exit=None)) is None
    assert problem(_summary(own_exit="exit 3")) == "summary.own_exit: expected dict | NoneType, got str"
    assert problem(_summary(own_exit={"ranks": [0]})) == "summary.own_exit.text: expected str"
    text = Console(io.StringIO(), color=False).render_summary(_summary(own_exit=ok))
    assert f"\nexit: {ok['text']}\n" in text
