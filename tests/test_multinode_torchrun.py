"""The shipped multinode-torchrun profile end to end through the real CLI: two torchrun agents, c10d rendezvous."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from tests.support.wait import exited, wait_until

pytestmark = [
    pytest.mark.main_suite(
        "long end-to-end rank runs (the engine and dashboard under them are in the any_python set); its plain"
        " rank scripts run on the test's own interpreter"),
]

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"


def _cli(runs_dir: Path) -> list[str]:
    return [sys.executable, "-m", "ddptui.tui.cli", "--runs-dir", str(runs_dir)]


def _env() -> dict:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    env.pop("NO_COLOR", None)
    return env


def _only_run(runs_dir: Path) -> Path:
    (d,) = list(runs_dir.iterdir())
    return d


def _events(run: Path) -> list[dict]:
    return [json.loads(x) for x in (run / "events.jsonl").read_text().splitlines() if x.strip()]


def _training(run: Path) -> set[int]:
    """Ranks with at least one step in the record's progress events."""
    return {e["rank"] for e in _events(run) if e["kind"] == "progress" and e.get("step")}


def _agents(plan: dict) -> list[dict]:
    return [p for p in plan["procs"] if "torch.distributed.run" in " ".join(p["argv"]) or "torchrun" in p["argv"][0]]


@pytest.mark.timeout(240)
def test_two_agents_train_one_job_and_replicas_match(runs_dir):
    p = subprocess.run([*_cli(runs_dir), "multinode-torchrun", "--no-ui"], cwd=ROOT, capture_output=True, text=True,
                       timeout=220, env=_env())
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-2000:]
    run = _only_run(runs_dir)
    plan = json.loads((run / "plan.json").read_text())
    agents = _agents(plan)
    assert len(agents) == 2, plan["procs"]  # one agent per node, started side by side
    for a in agents:  # a c10d rendezvous (group ranks in arrival order), not a static node rank
        argv = " ".join(a["argv"])
        assert "c10d" in argv and "--node-rank" not in argv and "--node_rank" not in argv, argv
    world = plan["world_size"]
    assert world >= 2
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "ok" and summary["replica"]["status"] == "identical", summary
    assert set(summary["ranks"]) == {str(r) for r in range(world)}
    for r in range(world):
        assert summary["ranks"][str(r)]["returncode"] == 0
    hellos = {e["rank"]: e for e in _events(run) if e["kind"] == "rank_hello"}
    assert set(hellos) == set(range(world)), hellos
    # each rank's record holds its own output: the rank learned from the hello, not the launch-order guess
    for r, h in hellos.items():
        assert h["node"], h
    nodes = {h["node"] for h in hellos.values()}
    assert len(nodes) == 2, hellos  # the ranks say which of the two agents' nodes they run on
    assert f"replicas: all {world} ranks hold byte-identical weights" in p.stdout, p.stdout[-2000:]


@pytest.mark.timeout(240)
def test_rank_killed_on_one_node_is_the_root_cause(runs_dir):
    # die_without_exception.py: a plain gloo DDP loop whose rank DIE_RANK SIGKILLs itself at step DIE_STEP
    args = ["multinode-torchrun", "--no-ui", "--set", f"workload.script={FIXTURES / 'die_without_exception.py'}",
            "--set", "env.DIE_RANK=1", "--set", "env.DIE_STEP=5", "--set", "env.DIE_HOW=sigkill",
            "--set", "replica_check=false"]
    t0 = time.monotonic()
    p = subprocess.run([*_cli(runs_dir), *args], cwd=ROOT, capture_output=True, text=True, timeout=220, env=_env())
    assert p.returncode == 1, p.stdout[-3000:] + p.stderr[-2000:]
    run = _only_run(runs_dir)
    crash = [e for e in _events(run) if e["kind"] == "crash_verdict"]
    assert len(crash) == 1, p.stdout[-3000:]
    assert crash[0]["root_rank"] == 1, crash[0]
    assert crash[0]["text"].startswith("rank 1 failed first: killed by SIGKILL ("), crash[0]
    assert " at step 5, no Python exception (last output: '[rank 1] dying (sigkill) at step 5')" in crash[0]["text"]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "failed" and summary["crash"]["root_rank"] == 1
    assert summary["ranks"]["1"]["status"] == "failed"
    nodes = {e["rank"]: e["node"] for e in _events(run) if e["kind"] == "rank_hello"}
    assert len(set(nodes.values())) == 2 and summary["ranks"]["1"]["node"] == nodes[1], (nodes, summary["ranks"])
    assert summary["ranks"]["0"]["status"] != "failed" or 0 in crash[0]["victims"], summary["ranks"]["0"]
    assert time.monotonic() - t0 < 200


@pytest.mark.timeout(240)
def test_sigint_stops_both_agents_and_every_rank(runs_dir):
    proc = subprocess.Popen([*_cli(runs_dir), "multinode-torchrun", "--no-ui", "--set", "steps=100000"], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=_env())
    try:
        def world_training() -> int | None:  # every rank trains: the record has a step of each
            runs = list(runs_dir.iterdir())
            run = runs[0] if runs else None
            if run is not None and (run / "plan.json").exists() and (run / "events.jsonl").exists():
                world = json.loads((run / "plan.json").read_text())["world_size"]
                if _training(run) >= set(range(world)):
                    return world
            return None
        world = wait_until(world_training, 180, "the ranks to start training", step=0.2,
                           stop_if=exited(proc, proc.stdout.read))
        tree = psutil.Process(proc.pid).children(recursive=True)
        agents = [c for c in tree if "torch.distributed.run" in " ".join(c.cmdline())]
        assert len(agents) == 2 and len(tree) >= 2 + world, [" ".join(c.cmdline())[:80] for c in tree]
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 1, out[-3000:]
    assert "status: stopped (exit 1)" in out, out[-3000:]
    left = [c for c in tree if c.is_running() and c.status() != psutil.STATUS_ZOMBIE]
    assert not left, [" ".join(c.cmdline())[:80] for c in left]
