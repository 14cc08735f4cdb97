"""The dashboard shows the engine's stack verdict only with the stacks it was read from, and never re-decides it."""
from __future__ import annotations

import pytest

from ddptui.runners import events as ev
from ddptui.tui.model import RunModel
from ddptui.tui.widgets.banner import banner_text
from ddptui.tui.widgets.stacks_view import render_stacks

pytestmark = pytest.mark.any_python

T = 1_700_000_000.0
SP = "/venv/lib/python3.11/site-packages"
HELPER = {"thread": "ddptui-report", "idle": True, "helper": True,
          "frames": [["_flush_quiet", "/x/runners/inject/ddptui_report.py", 141, ""]]}


def threads(rank_frames):
    return [HELPER, {"thread": "MainThread", "idle": True, "frames": rank_frames}]  # helper first, as an old record


STALL_STACKS = ev.StacksCollected(
    {0: "py-spy", 1: "py-spy"},
    {0: threads([["all_reduce", f"{SP}/torch/distributed/distributed_c10d.py", 3000, "work.wait()"],
                 ["main", "/w/train.py", 22, "dist.all_reduce(t)"]]),
     1: threads([["wait_for_lock", "/w/train.py", 9, "threading.Event().wait()"], ["main", "/w/train.py", 25, ""]])},
    0.05, "/runs/r/stacks/01-stall", T + 10, {}, "stall")
VERDICT = ev.HangVerdict("rank 1 is stuck in wait_for_lock() at train.py:9 (calls threading.Event.wait), step 10; "
                         "rank 0 waits in all_reduce at train.py:22 since 13:00:00", (1,), (0,),
                         {1: {"category": "sleep", "detail": "waits on threading (wait)", "func": "wait_for_lock",
                              "file": "/w/train.py", "line": 9, "thread": "MainThread", "calls": "threading.Event.wait",
                              "step": 10}}, T + 10, "/runs/r/stacks/01-stall", "stall")
ON_REQUEST = ev.StacksCollected(STALL_STACKS.method, STALL_STACKS.threads, 0.04, "/runs/r/stacks/02-on-request",
                                T + 30, {}, "on request")


def test_verdict_shown_with_its_own_stacks():
    text = render_stacks(STALL_STACKS, VERDICT).plain
    assert text.startswith("rank 1 is stuck in wait_for_lock()") and "rank 1 (culprit)" in text
    assert "sleep: waits on threading (wait) · wait_for_lock() at train.py:9 (calls threading.Event.wait)" in text
    # ddptui's own threads: one line after the rank's, their frames left to the stacks file
    assert text.index("thread MainThread") < text.index("ddptui's own threads: ddptui-report (idle, 1 frame folded")
    assert "_flush_quiet" not in text and "thread ddptui-report" not in text


def test_a_later_dump_on_request_shows_no_earlier_verdict():
    text = render_stacks(ON_REQUEST, VERDICT).plain
    assert text.startswith("Stacks taken on request at ") and "no rank is stalled, so no verdict" in text
    assert "culprit" not in text and "waiting" not in text and "stuck" not in text


def test_collective_frames_are_the_engines():
    rich = render_stacks(STALL_STACKS, VERDICT)
    hot = [rich.plain[s.start:s.end] for s in rich.spans if str(s.style) == "bold magenta"]
    assert "all_reduce" in hot and "main" not in hot  # the user's frame that calls it is not the collective


def test_banner_says_what_the_engine_decided():
    m = RunModel()
    m.apply([ev.RunStarted("/runs/r", "p", "torchrun", 2, None, T), STALL_STACKS])
    assert banner_text(m) == ("", "")  # stacks alone are no diagnosis
    m.apply([ev.HangVerdict("the run slowed down: rank 1 ...", (1,), (0,), {}, T + 11, "/runs/r/stacks/01-slow", "slow")])
    assert banner_text(m)[0] == "-info" and banner_text(m)[1].startswith("SLOW: the run slowed down")
    m.apply([ev.StallDetected((0, 1), (), T, 3.0, T + 20), VERDICT])
    assert banner_text(m) == ("-stall", f"STALL: {VERDICT.text}")


# ---- issue 23 item 11: the Stacks tab at 80x24 -----------------------------------------------------------------------------------
def test_the_culprit_comes_first_then_the_ranks_waiting_for_it():
    from ddptui.tui.widgets.stacks_view import rank_order, render_stacks
    helper = {"thread": "ddptui-collectives", "idle": True, "helper": True,
              "frames": [["_loop", "/x/runners/inject/ddptui_fr.py", 156, ""]] * 6}
    main = {"thread": "MainThread", "idle": True, "frames": [["main", "/w/train.py", 9, ""]]}
    stacks = ev.StacksCollected({r: "py-spy" for r in range(4)}, {r: [main, helper] for r in range(4)}, 0.1,
                                "runs/x/stacks/01-stall", T)
    hv = ev.HangVerdict("rank 2 is stuck in main() at train.py:9", (2,), (0, 3), {}, T, "runs/x/stacks/01-stall")
    assert rank_order(range(4), hv) == [2, 0, 3, 1]
    plain = render_stacks(stacks, hv).plain
    heads = [ln.split(" ·")[0] for ln in plain.split("\n") if ln.startswith("━━ rank ")]
    assert heads == ["━━ rank 2 (culprit)", "━━ rank 0 (waiting)", "━━ rank 3 (waiting)", "━━ rank 1"]
    assert plain.count("ddptui's own threads: ddptui-collectives (idle, 6 frames folded") == 4 and "_loop" not in plain
