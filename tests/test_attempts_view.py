"""A run's attempts as the front ends show them: the model's timeline, the Verdict tab, the console's lines and summary,
and a replayed record's events."""
from __future__ import annotations

import io

import pytest

from ddptui.runners import events as ev
from ddptui.tui.console import Console
from ddptui.tui.model import RunModel
from ddptui.tui.widgets.verdict_view import headline

pytestmark = pytest.mark.any_python

T = 1_764_682_000.0
CRASH = "rank 1 failed first (exit 1): RuntimeError: bad batch at train.py:15"
WHY = "torchrun restarted every rank (0 of 1 restart(s) left)"


def restarted() -> list:
    return [ev.RunStarted("runs/x", "p", "torchrun", 2, 20, T), ev.AttemptStarted(0, "", T),
            ev.RankHello(0, 100, "h", 2, T + 1), ev.Progress(0, 7, 0.5, T + 2, "hook"),
            ev.RankState(1, "failed", "exit 1", T + 3),
            ev.AttemptEnded(0, "failed", CRASH, T + 3.5),
            ev.AttemptStarted(1, WHY, T + 5), ev.RankState(0, "starting", "attempt 1", T + 5),
            ev.RankState(1, "starting", "attempt 1", T + 5), ev.RankHello(0, 200, "h", 2, T + 6)]


def test_the_model_keeps_each_attempt_and_the_ranks_start_over_after_a_restart():
    m = RunModel()
    m.apply(restarted())
    assert [(a["attempt"], a["status"], a["ended"]) for a in m.attempts] == [(0, "failed", T + 3.5),
                                                                            (1, "running", None)]
    assert m.rank(0).step is None and m.rank(0).pid == 200 and m.rank(1).status == "starting"
    head = headline(m).plain
    assert "attempts (2; torchrun restarted every rank after a failure):" in head
    assert "attempt 0  " in head and f"3.5 s  failed: {CRASH}" in head and "attempt 1" in head and "running" in head
    m.apply([ev.AttemptEnded(1, "ok", "", T + 20), ev.RunFinished("ok", 0, "runs/x/summary.json", T + 20, {})])
    assert m.attempts[1]["status"] == "ok" and "15.0 s  ended ok" in headline(m).plain


def test_a_run_that_cannot_restart_shows_no_attempts():
    m = RunModel()
    m.apply([ev.RunStarted("runs/x", "p", "torchrun", 2, 20, T), ev.RankHello(0, 100, "h", 2, T + 1)])
    assert m.attempts == [] and "attempts" not in headline(m).plain


def test_the_console_says_each_attempt_as_it_ends_and_the_timeline_in_its_summary():
    out = io.StringIO()
    c = Console(out, color=False)
    c.handle(restarted())
    said = out.getvalue()
    assert f"[attempt] attempt 0 failed: {CRASH}\n" in said and f"[attempt] attempt 1 began: {WHY}\n" in said
    summary = {"profile": "p", "runner": "torchrun", "world_size": 2, "ranks": {}, "status": "ok", "run_dir": "runs/x",
               "restarts": 1, "max_restarts": 1,
               "attempts": [{"attempt": 0, "began": T, "ended": T + 3.5, "status": "failed", "verdict": CRASH,
                             "stacks": ""},
                            {"attempt": 1, "began": T + 5, "ended": T + 20, "status": "stalled", "verdict": "hung",
                             "stacks": "runs/x/stacks/01-attempt1-stall"}]}
    text = c.render_summary(ev.RunFinished("ok", 0, "runs/x/summary.json", T + 20, summary))
    assert "attempts: 2 (1 restart(s) of torchrun, at most 1); the ranks above are the last attempt's" in text
    assert f"3.5 s  failed: {CRASH}" in text
    assert "15.0 s  stalled: hung (stacks: runs/x/stacks/01-attempt1-stall)" in text


def test_attempt_events_go_through_the_record_and_back():
    for e in (ev.AttemptStarted(1, WHY, T), ev.AttemptEnded(0, "stalled", "hung", T, "runs/x/stacks/01-attempt0-stall")):
        assert ev.from_json(e.to_json()) == e
