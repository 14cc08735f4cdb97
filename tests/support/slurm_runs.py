"""ddptui run by a test on the login node of a real Slurm cluster, its record read, and the job seen gone."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.support.wait import exited, wait_until

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"


def cli_env() -> dict:
    return {"PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}


def cli_argv(runs_dir: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "ddptui.tui.cli", "--runs-dir", str(runs_dir), *args]


def live(cluster, runs_dir: Path, *args: str, env: dict | None = None) -> subprocess.Popen:
    """ddptui on the login node (node 0): this host, or node0's namespaces on the namespaced cluster."""
    return cluster.on_node(0, cli_argv(runs_dir, *args), env={**cli_env(), **(env or {})}, cwd=ROOT,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def events(run: Path) -> list[dict]:
    return [json.loads(x) for x in (run / "events.jsonl").read_text().splitlines() if x.strip()]


def of(run: Path, kind: str) -> list[dict]:
    return [e for e in events(run) if e["kind"] == kind]


def assert_no_job_left(cluster, within: float = 40) -> None:
    """squeue empty (nothing RUNNING or COMPLETING; scancel's KillWait is 5 s) and no slurmstepd left."""
    cluster.wait_no_jobs(timeout=within)


def wait_training(proc: subprocess.Popen, runs_dir: Path, timeout: float = 150) -> Path:
    """Wait until the record has a step of every rank; returns the run folder."""
    def trained() -> Path | None:
        runs = list(runs_dir.iterdir())
        if runs and (runs[0] / "plan.json").exists() and (runs[0] / "events.jsonl").exists():
            world = json.loads((runs[0] / "plan.json").read_text())["world_size"]
            if {e["rank"] for e in of(runs[0], "progress") if e.get("step")} >= set(range(world)):
                return runs[0]
        return None
    return wait_until(trained, timeout, "the ranks to train (a step of every rank in the record)", step=0.3,
                      stop_if=exited(proc, proc.stdout.read))


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.kill()
        proc.wait()
