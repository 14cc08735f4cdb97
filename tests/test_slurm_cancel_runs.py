"""A `scancel` from outside ddptui on a real Slurm cluster: an ad-hoc srun, the sbatch runner and `attach --slurm` each
say who cancelled the job (slurmctld's record of it) and that its ranks were stopped by Slurm, not a crash."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.cli import only_run
from tests.support.slurm_runs import FIXTURES, assert_no_job_left, cli_argv, cli_env, of, stop, wait_training
from tests.support.wait import exited, wait_until

pytestmark = pytest.mark.main_suite("a real Slurm cluster whose tasks run the test's own interpreter")

LOOP = FIXTURES / "slurm_procid_ddp_loop.py"  # a plain gloo DDP loop under srun that runs until it is stopped
UID0 = "scancel by uid 0 (root)"  # the test cluster runs as root: slurmctld logs the kill request's uid 0


def running_job(cluster) -> str:
    jobs = [j for j in cluster.jobs() if j[1] == "RUNNING"]
    assert len(jobs) == 1, jobs
    return jobs[0][0]


def scancel(cluster, job_id: str) -> None:
    r = cluster.run(["scancel", job_id], timeout=30)
    assert r.returncode == 0, r.stderr


def assert_said_cancelled_from_outside(run: Path, out: str, code: int) -> None:
    assert code == 1, out[-3000:]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "cancelled" and summary["crash"] is None, (summary["status"], summary["crash"])
    job = summary["job"]
    assert job["state"] == "CANCELLED" and job["cancelled_by_ddptui"] is False and job["cancelled_by"] == "uid 0 (root)"
    for r, info in summary["ranks"].items():
        assert info["status"] == "killed" and info["outcome"].startswith(f"stopped by Slurm: {UID0} at "), (r, info)
    assert not of(run, "crash_verdict")
    assert f"(cancelled from outside ddptui: {UID0})" in out, out[-2000:]
    assert "failed first" not in out and "cancelled by ddptui" not in out and "a rank failed" not in out


def cancel_while_training(cluster, runs_dir: Path, *args: str) -> None:
    """ddptui runs `args` on the cluster's login node; once every rank trains, someone else scancels the job."""
    proc = cluster.on_node(0, cli_argv(runs_dir, *args), env=cli_env(), cwd=FIXTURES.parent.parent,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        run = wait_training(proc, runs_dir)
        scancel(cluster, running_job(cluster))
        out, _ = proc.communicate(timeout=120)
    finally:
        stop(proc)
    assert_said_cancelled_from_outside(run, out, proc.returncode)
    assert_no_job_left(cluster)


@pytest.mark.timeout(300)
def test_adhoc_srun_cancelled_from_outside(slurm_clean, runs_dir):
    cancel_while_training(slurm_clean, runs_dir, "--no-ui", "--", "srun", "-N2", "--ntasks-per-node=1", sys.executable,
                          str(LOOP))


@pytest.mark.timeout(300)
def test_sbatch_runner_cancelled_from_outside(slurm_clean, runs_dir):
    cancel_while_training(slurm_clean, runs_dir, "slurm-ddp", "--no-ui", "--set", "steps=1000000")


@pytest.mark.timeout(300)
def test_attached_slurm_job_cancelled_from_outside(slurm_clean, runs_dir, tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    job = slurm_clean.srun_outside("outside", LOOP, logs, stderr=subprocess.DEVNULL)
    proc = None
    try:
        slurm_clean.wait_for_lines(job, logs)
        job_id = running_job(slurm_clean)
        attach = [sys.executable, "-m", "ddptui.tui.cli", "attach", "--slurm", job_id, "--watch", "--runs-dir",
                  str(runs_dir)]
        proc = slurm_clean.on_node(0, attach, env=cli_env(),
                                   cwd=FIXTURES.parent.parent, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                   text=True)
        wait_until(lambda: runs_dir.exists() and any(runs_dir.iterdir()) and len(of(only_run(runs_dir), "rank_hello"))
                   == 2 and of(only_run(runs_dir), "progress"), 120, "attached to both ranks", step=0.2,
                   stop_if=exited(proc, proc.stdout.read))
        scancel(slurm_clean, job_id)
        out, _ = proc.communicate(timeout=120)
        job.wait(timeout=60)
    finally:
        if proc is not None:
            stop(proc)
        slurm_clean.end_job(job)
    assert_said_cancelled_from_outside(only_run(runs_dir), out, proc.returncode)
    assert_no_job_left(slurm_clean)
