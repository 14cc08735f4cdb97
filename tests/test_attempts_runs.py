"""torchrun's restarts followed for real: plain DDP programs that fail (an exception, then a SIGKILL) or hang in their
first attempts only and train to the end in the next; one headless run per scenario, several checks on each."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.support.cli import RAISED, ddptui, only_run

pytestmark = pytest.mark.main_suite("real torchrun runs restarted by its elastic agent (20-40 s each)")

FIXTURES = Path(__file__).resolve().parent / "fixtures"


@pytest.fixture(scope="module")
def crash_then_kill(tmp_path_factory):
    runs = tmp_path_factory.mktemp("restarts")
    done = ddptui("--no-ui", "--", sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
                  "2", "--max-restarts", "2", str(FIXTURES / "restarts_crash_then_kill.py"), runs_dir=runs, timeout=240)
    run = only_run(runs)
    return done, run, json.loads((run / "summary.json").read_text())


@pytest.fixture(scope="module")
def hang_once(tmp_path_factory):
    runs = tmp_path_factory.mktemp("restarts")
    profile = runs / "hang.yaml"
    profile.write_text(f"name: hang-once\nworkload:\n  script: {FIXTURES / 'restarts_hang_once.py'}\n"
                       f"  python: {sys.executable}\nnproc: 2\nstall_after: 4\non_stall: stop\nmax_restarts: 1\n")
    done = ddptui("--no-ui", str(profile), runs_dir=runs / "runs", timeout=240)
    run = only_run(runs / "runs")
    return done, run, json.loads((run / "summary.json").read_text())


def test_a_crash_and_a_sigkill_end_their_attempts_and_the_third_trains_to_the_end(crash_then_kill):
    done, run, summary = crash_then_kill
    assert done.returncode == 0, done.stdout[-3000:]
    assert summary["status"] == "ok" and summary["restarts"] == 2 and summary["max_restarts"] == 2
    a0, a1, a2 = summary["attempts"]
    assert (a0["status"], a0["crash"]["root_rank"]) == ("failed", 1) and a0["crash"]["exit"] in RAISED, a0
    assert "RuntimeError: bad batch in attempt 0" in a0["verdict"]
    assert (a1["status"], a1["crash"]["root_rank"], a1["crash"]["exit"]) == ("failed", 0, "SIGKILL")
    assert "killed by SIGKILL" in a1["verdict"]
    assert (a2["status"], a2["verdict"]) == ("ok", "")
    assert a0["began"] <= a0["ended"] <= a1["began"] <= a1["ended"] <= a2["began"] <= a2["ended"]
    assert a1["why"] == "torchrun restarted every rank (1 of 2 restart(s) left)"
    assert all(r["steps"] == 20 and r["status"] == "exited" for r in summary["ranks"].values())
    assert summary["crash"] is None  # the run's end is its last attempt's: no crash
    out = done.stdout
    assert any(f"[attempt] attempt 0 failed: rank 1 failed first ({how}): RuntimeError: bad batch in attempt 0" in out
               for how in RAISED), out[-3000:]
    assert "[attempt] attempt 1 began: torchrun restarted every rank" in out
    assert "[attempt] attempt 2 ended ok" in out
    assert "attempts: 3 (2 restart(s) of torchrun, at most 2)" in out
    events = [json.loads(ln) for ln in (run / "events.jsonl").read_text().splitlines()]
    said = [(e["kind"], e["attempt"]) for e in events if e["kind"].startswith("attempt_")]
    assert said == [("attempt_started", 0), ("attempt_ended", 0), ("attempt_started", 1), ("attempt_ended", 1),
                    ("attempt_started", 2), ("attempt_ended", 2)]
    hellos = [e["pid"] for e in events if e["kind"] == "rank_hello"]
    assert len(hellos) == 6 and len(set(hellos)) == 6  # every attempt's ranks are new processes, each seen


def test_a_hang_in_attempt_0_is_judged_from_its_stacks_then_ended_for_torchrun_to_restart(hang_once):
    done, run, summary = hang_once
    assert done.returncode == 0, done.stdout[-3000:]
    assert summary["status"] == "ok" and summary["restarts"] == 1
    a0, a1 = summary["attempts"]
    assert a0["status"] == "stalled" and a0["stacks"].endswith("stacks/01-attempt0-stall")
    assert "rank 1 is stuck in <module> at restarts_hang_once.py:17 (calls time.sleep)" in a0["verdict"]
    assert a0["verdict"].endswith("ddptui ended its ranks for torchrun to restart them (on_stall: stop)")
    assert (a1["status"], a1["verdict"]) == ("ok", "")
    assert sorted(p.name for p in (run / "stacks").iterdir()) == ["01-attempt0-stall"]
    assert (run / "stacks" / "01-attempt0-stall" / "verdict.txt").exists()
    assert summary["stall"] is None and summary["hang"] is None  # the hang was attempt 0's, not the run's end
    assert all(r["steps"] == 15 for r in summary["ranks"].values())
    out = done.stdout
    assert "ddptui: on_stall=stop with 1 of 1 torchrun restart(s) left: stacks taken, ending attempt 0's ranks" in out
    assert "[attempt] attempt 0 stalled: " in out and "[attempt] attempt 1 ended ok" in out
