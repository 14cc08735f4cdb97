"""Slow-down and stall decisions on real torchrun + gloo runs of plain user scripts, on this loaded machine."""
from __future__ import annotations

import io
import json
import re
import sys
from pathlib import Path

import pytest

from ddptui.runners import events as ev
from ddptui.runners.session import EXIT_OK, EXIT_STALLED
from tests.support.engine import run_profile, script_profile
from ddptui.tui.console import Console

pytestmark = pytest.mark.main_suite(
    "long end-to-end rank runs (the engine and dashboard under them are in the any_python set)")


def launcher_lines(rec) -> list[str]:
    return rec.lines(None)


@pytest.mark.timeout(150)
def test_plain_script_whose_rank_1_slows_down_is_named(runs_dir, tmp_path):
    # lock-step DDP: rank 1 sleeps 0.3 s per step from step 20, rank 0 waits for it in the all-reduce, so both
    # ranks' steps slow down; the engine must name rank 1, the one whose own work grew
    path = script_profile(tmp_path, "slow_rank_ddp.py", {"SLOW_SECONDS": "0.3", "SLOW_FROM": "20", "STEPS": "36"})
    code, rec, session = run_profile(path, runs_dir)
    assert code == EXIT_OK and not rec.of(ev.StallDetected)
    slow = [e for e in rec.of(ev.RankState) if e.status == "slow"]
    assert [e.rank for e in slow] == [1], slow
    m = re.fullmatch(r"steps take ([\d.]+) s, (\d+)x its first (\d+) steps' .*", slow[0].detail)
    assert m and float(m[1]) >= 0.3 and int(m[2]) >= 4 and int(m[3]) >= 20, slow[0].detail
    assert any(ln.startswith("ddptui: rank 1's steps take") for ln in launcher_lines(rec))
    summary = json.loads((session.run_dir / "summary.json").read_text())
    assert summary["slow"]["ranks"] == [1]
    text = Console(io.StringIO(), color=False).render_summary(rec.one(ev.RunFinished))
    assert "\nslow: rank 1's steps take" in text
    # the stack sample of a run that still moves is phrased as a slow-down: summary.json's slow, never its hang
    sample = rec.of(ev.HangVerdict)[-1]
    assert sample.reason == "slow" and sample.culprits == (1,), sample
    assert re.match(r"the run slowed down \(rank 1's steps take [\d.]+ s, \d+x its first \d+ steps' [\d.]+ (?:ms|us)\): "
                    r"rank 1 is in main\(\) at slow_rank_ddp\.py:\d+ \(calls time\.sleep\)", sample.text), sample.text
    assert "stuck" not in sample.text and "lost peer" not in sample.text and "mismatched" not in sample.text
    assert summary["hang"] is None and summary["slow"]["verdict"]["text"] == sample.text
    assert f"\nslow: {sample.text}\n" in text and "\nstall:" not in text


@pytest.mark.timeout(150)
def test_ranks_busy_on_cpu_before_their_first_step_are_not_stalled(runs_dir, tmp_path):
    # 14 s of pure CPU work without output before the first step, under startup_grace 10: busy, not stalled
    # (held up to 3 x 10 s: start-up on this loaded machine also takes seconds without output)
    path = script_profile(tmp_path, "busy_first_step_ddp.py", {"BUSY_SECONDS": "14", "STEPS": "20"},
                          startup_grace=10, stall_after=3)
    code, rec, session = run_profile(path, runs_dir)
    assert not rec.of(ev.StallDetected), [e.reason for e in rec.of(ev.StallDetected)]
    assert code == EXIT_OK
    held = [ln for ln in launcher_lines(rec) if "busy, not stalled" in ln]
    assert held and "(startup_grace 10 s applies before the first step)" in held[0], launcher_lines(rec)
    assert all(t.step == 20 for t in session.tracks.values()), {r: (t.step, t.status) for r, t in session.tracks.items()}


@pytest.mark.timeout(150)
def test_a_hang_before_the_first_step_names_the_startup_grace_that_applied(runs_dir, tmp_path):
    # rank 1 sleeps forever before its first step; rank 0 blocks in the all-reduce. On this loaded machine rank 0
    # may still be starting up (busy on CPU) when the grace runs out: then the stall comes at 3 x the grace (x the
    # machine's overload when it is over its cores: the reason says how long)
    path = script_profile(tmp_path, "hang_ddp.py", {"HANG_STEP": "0", "PG_TIMEOUT": "300"}, startup_grace=5,
                          stall_after=3)
    code, rec, session = run_profile(path, runs_dir)
    assert code == EXIT_STALLED
    stall = rec.one(ev.StallDetected)
    assert stall.threshold == 5.0  # the grace applied, not stall_after
    assert re.match(r"no step or output for \d+ s \(startup_grace 5 s applies before the first step\)($|; )",
                    stall.reason), stall.reason
    held = re.search(r"held 3 x the limit(?: x [\d.]+)? \((\d+) s", stall.reason)
    assert stall.wall - stall.since <= (float(held[1]) if held else 3 * 5) + 3
    assert 1 in rec.of(ev.HangVerdict)[0].culprits
    assert json.loads((session.run_dir / "summary.json").read_text())["stall"]["reason"] == stall.reason


@pytest.mark.timeout(150)
def test_a_rank_spinning_forever_is_held_then_called_stalled(runs_dir, tmp_path):
    # rank 1 spins in a busy loop at step 3 (100 % of a core, no step), rank 0 waits for it in the all-reduce
    path = script_profile(tmp_path, "hang_ddp.py", {"HANG_STEP": "3", "HANG_MODE": "spin", "PG_TIMEOUT": "300"},
                          stall_after=2)
    code, rec, session = run_profile(path, runs_dir)
    assert code == EXIT_STALLED
    stall = rec.one(ev.StallDetected)
    assert "rank 1 still uses" in stall.reason and "busy but not progressing" in stall.reason, stall.reason
    assert stall.reason.startswith("no step or output for ") and "(stall_after 2 s)" in stall.reason
    # held to 3 x stall_after (x the machine's overload when it is over its cores: the reason says how long), not
    # called at 2 s
    held = float(re.search(r"held 3 x the limit(?: x [\d.]+)? \((\d+) s", stall.reason)[1])
    assert 6 <= held and held - 0.5 <= stall.wall - stall.since <= held + 4, stall.reason
    assert any("busy, not stalled" in ln for ln in launcher_lines(rec))
    assert rec.of(ev.HangVerdict)[0].culprits == (1,)


@pytest.mark.timeout(150)
def test_a_stall_that_ends_is_cleared_and_its_verdict_kept(runs_dir, tmp_path):
    # rank 1 pauses 15 s at step 3, rank 0 waits in the all-reduce: a stall (on_stall dump: stacks, a verdict, the
    # run goes on); then both ranks progress again, and the engine says the stall is over
    path = script_profile(tmp_path, "pause_then_resume_ddp.py", {"PAUSE_SECONDS": "15", "STEPS": "8"},
                          stall_after=3, on_stall="dump")
    code, rec, session = run_profile(path, runs_dir)
    assert code == EXIT_OK
    stall, cleared = rec.one(ev.StallDetected), rec.one(ev.StallCleared)
    assert cleared.ranks == stall.stalled and cleared.wall > stall.wall
    hang = rec.one(ev.HangVerdict)
    assert hang.reason == "stall" and hang.culprits == (1,) and "take_a_break()" in hang.text, hang.text
    # recorded and replayable like every other event; the dashboard's model drops the banner, keeps the verdict
    from ddptui.runners.edge.record import replay_events
    from ddptui.tui.model import RunModel
    from ddptui.tui.widgets.banner import banner_text
    problems: list[str] = []
    replayed = list(replay_events(session.run_dir, problems))
    assert not problems and [e.ranks for e in replayed if isinstance(e, ev.StallCleared)] == [stall.stalled]
    model = RunModel()
    model.apply(replayed)
    assert model.stall is None and model.hang.text == hang.text
    assert not banner_text(model)[1].startswith("STALL")
    out = io.StringIO()
    Console(out, color=False).handle(rec.events)
    assert "stall over: " + ("rank 1" if stall.stalled == (1,) else "ranks ") in out.getvalue()


TRAIN = """
import torch
w = torch.nn.Parameter(torch.ones(4))
opt = torch.optim.SGD([w], lr=0.1)
for step in range(5):
    loss = (w * w).sum()
    loss.backward()
    opt.step()
    opt.zero_grad()
    print(f"step {step} loss {loss.item():.4f}", flush=True)
"""


@pytest.mark.timeout(150)
def test_a_rank_whose_start_keeps_its_launchers_tree_busy_is_not_stalled(runs_dir, tmp_path):
    """Before a rank says its pid its CPU is its launcher's, and a launcher waits while what it started works
    (torch_xla's worker importing torch for tens of seconds on a loaded machine, 0 % for the launcher itself: the
    issue's run was torn down at startup_grace, 'never started'). Here torchrun's rank is a shell that computes 8 s
    before its Python starts: the launcher's whole tree is busy, the start-up is held, and the run completes."""
    (tmp_path / "train.py").write_text(TRAIN)
    torchrun = str(Path(sys.executable).parent / "torchrun")
    rank = f"end=$((SECONDS+8)); while ((SECONDS<end)); do :; done; exec {sys.executable} -u {tmp_path / 'train.py'}"
    path = tmp_path / "slow_start.yaml"
    path.write_text("\n".join([
        "name: slow_start", "workload:", "  command: " + json.dumps(
            [torchrun, "--standalone", "--nproc_per_node=1", "--no-python", "bash", "-c", rank]),
        "startup_grace: 6", "stall_after: 3", "on_stall: stop", "timeout: 120"]) + "\n")
    code, rec, session = run_profile(path, runs_dir)
    assert not rec.of(ev.StallDetected), [e.reason for e in rec.of(ev.StallDetected)]
    assert code == EXIT_OK and session.tracks[0].step == 5
    held = [ln for ln in launcher_lines(rec) if "busy, not stalled" in ln]
    assert held and "(startup_grace 6 s applies before the first step)" in held[0], rec.lines(None)
