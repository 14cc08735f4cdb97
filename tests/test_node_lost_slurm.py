"""A whole node of a Slurm job lost or frozen, on the real cluster on two namespaced hosts (ddptui on node0, wrapping a
user's own `srun` of a plain gloo script): every process of node1 SIGKILLed mid-run or during start-up, or node1's
rank and its slurmstepd SIGSTOPped. The verdict names the node (or the stopped rank), not a victim, and the teardown
is one bounded wait; node1's slurmd is started again after, no job or process is left."""
from __future__ import annotations

import contextlib
import datetime
import json
import signal
import sys
import time
from pathlib import Path

import pytest

from ddptui.runners.judge.job_follow import STARTUP_ASK_AFTER
from ddptui.runners.edge.srun_exec import REMOTE_TIMEOUT, STOP_WAIT
from tests.support.wait import wait_until
from tests.support.slurm_runs import assert_no_job_left, live, of, stop, wait_training

pytestmark = pytest.mark.main_suite(
    "a real Slurm cluster on namespaced hosts whose gloo job runs the test's own interpreter")

FIXTURES = Path(__file__).resolve().parent / "fixtures"
TRAINS = FIXTURES / "slurm_procid_ddp_loop.py"
STAGES = FIXTURES / "slurm_rank1_stages_data.py"
ASK_BOUND = REMOTE_TIMEOUT + STOP_WAIT + 5  # one srun asking node1, and the loop's turn around it


@contextlib.contextmanager
def adhoc(cluster, runs_dir: Path, script: Path, *sets: str):
    """ddptui on node0 wrapping `srun -N2 --ntasks-per-node=1 python SCRIPT`; after, node1's slurmd is up again and
    no job of it is left."""
    proc = live(cluster, runs_dir, "--no-ui", *sets, "--", "srun", "-N2", "--ntasks-per-node=1", sys.executable,
                str(script))
    try:
        yield proc
    finally:
        stop(proc)
        cluster.restart_node(1)
    assert_no_job_left(cluster)


def kill_node1(cluster, proc) -> str:
    """Every process of node1 SIGKILLed (its slurmd, slurmstepd, the rank: the machine is gone); ddptui's output."""
    cluster.signal_node(1, signal.SIGKILL)
    out, _ = proc.communicate(timeout=150)
    assert proc.returncode == 1, out[-3000:]
    return out


def node1_lost(run: Path) -> dict:
    (lost,) = of(run, "node_lost")
    assert (lost["node"], lost["ranks"]) == ("node1", [1]), lost
    return lost


def launcher_log(run: Path) -> list[tuple[float, str]]:
    """(wall time, text) of every line of ddptui's and the launcher's own output."""
    out = []
    for ln in (run / "launcher.log").read_text().splitlines():
        stamp, _, rest = ln.partition(" ")
        out.append((datetime.datetime.fromisoformat(stamp).timestamp(), rest.partition(" ")[2]))
    return out


@pytest.mark.timeout(300)
def test_a_node_killed_mid_run_is_the_root_cause_and_the_teardown_waits_once(slurm_hosts_clean, runs_dir):
    cluster = slurm_hosts_clean
    with adhoc(cluster, runs_dir, TRAINS) as proc:
        run = wait_training(proc, runs_dir)
        killed = time.time()
        out = kill_node1(cluster, proc)
        ended = time.time()
    lost = node1_lost(run)
    assert lost["why"].startswith("its slurmd does not answer (srun: "), lost["why"]
    assert "and rank 1 there is gone (rank 0: Connection" in lost["why"], lost["why"]
    (crash,) = of(run, "crash_verdict")
    assert crash["text"].startswith("node node1 lost (its slurmd does not answer") and crash["root_rank"] is None, crash
    assert "the root cause; rank 0 failed after it (exit 1: Connection" in crash["text"], crash["text"]
    assert crash["victims"] == [0], crash
    summary = json.loads((run / "summary.json").read_text())
    ranks = summary["ranks"]
    assert ranks["0"]["outcome"].startswith("failed after node node1 was lost"), ranks
    assert ranks["1"]["outcome"] == "lost with node node1", ranks
    assert "node lost: node1 (rank 1): its slurmd does not answer" in out, out[-3000:]
    # one scancel, one wait bounded and said: srun's exit, not node1's share Slurm holds until SlurmdTimeout
    said = launcher_log(run)
    scancels = [(w, t) for w, t in said if t.startswith("ddptui: scancel ")]
    assert len(scancels) == 1, said
    assert any("Slurm keeps job" in t and "on node1, lost" in t and "not waited for" in t for _, t in said), said
    assert not any("still holds" in t for _, t in said), said
    assert ended - scancels[0][0] <= 30, (ended - scancels[0][0], said)
    assert lost["wall"] - killed <= ASK_BOUND + 15, (lost["wall"] - killed, out[-3000:])


@pytest.mark.timeout(300)
def test_a_node_lost_during_start_up_is_named_long_before_the_startup_grace(slurm_hosts_clean, runs_dir):
    cluster = slurm_hosts_clean
    with adhoc(cluster, runs_dir, STAGES) as proc:
        def waiting():  # rank 0 waits in its rendezvous, rank 1 (node1) said hello and stages its data
            runs = list(runs_dir.iterdir())
            if not runs or not (runs[0] / "events.jsonl").exists():
                return None
            hellos = {e["rank"] for e in of(runs[0], "rank_hello")}
            rdv = [e for e in of(runs[0], "rank_phase") if e["rank"] == 0 and e["phase"] == "rendezvous"]
            return (runs[0], rdv[0]["wall"]) if hellos == {0, 1} and rdv else None
        run, rdv_at = wait_until(waiting, 150, "rank 0 in its rendezvous and rank 1's hello")
        out = kill_node1(cluster, proc)
    lost = node1_lost(run)
    assert "while rank 0 waits for rank 1 in the rendezvous" in lost["why"], lost["why"]
    assert lost["wall"] - rdv_at <= STARTUP_ASK_AFTER + ASK_BOUND + 10, (lost["wall"] - rdv_at, out[-3000:])
    assert not of(run, "stall"), out[-3000:]  # not a stall after startup_grace (60 s)
    (crash,) = of(run, "crash_verdict")
    assert crash["text"].startswith("node node1 lost (its slurmd does not answer"), crash


@pytest.mark.timeout(300)
def test_a_stopped_rank_on_another_node_is_named_stopped(slurm_hosts_clean, runs_dir):
    cluster = slurm_hosts_clean
    with adhoc(cluster, runs_dir, TRAINS, "--set", "stall_after=10") as proc:
        run = wait_training(proc, runs_dir)
        try:
            cluster.signal_node(1, signal.SIGSTOP, spare_slurmd=True)  # the rank and its slurmstepd: state T
            wait_until(lambda: of(run, "hang_verdict") or proc.poll() is not None, 120, "the stall verdict")
        finally:
            cluster.signal_node(1, signal.SIGCONT)
        out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 3, out[-3000:]
    (hang,) = of(run, "hang_verdict")
    assert hang["text"].startswith("rank 1 (node1) is stopped (SIGSTOP: state T), every other rank waits for it: "
                                   "rank 0 waits in all_reduce"), hang["text"]
    assert hang["culprits"] == [1] and hang["waiting"] == [0], hang
    assert "ptrace" not in hang["text"] and "no Flight Recorder dump" not in hang["text"], hang["text"]
    assert "resumes rank 1" in hang["fix"] and "on node1" in hang["fix"], hang["fix"]
    (stacks,) = of(run, "stacks")
    assert stacks["method"]["1"] == "unavailable: the process is stopped (State: T (stopped))", stacks["method"]
    assert stacks["fr"]["1"] == "unavailable: rank 1 is stopped (State: T (stopped))", stacks["fr"]
    assert not of(run, "node_lost")  # its slurmd answered: the node is there, the rank is stopped
