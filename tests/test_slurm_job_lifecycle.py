"""The engine follows and ends a real Slurm job (tests/support/slurm_cluster.py's cluster): the job's states as events,
a pending job is no stall, a stop scancels it and leaves nothing. The plan is written here (a batch script a user
would write, submitted with `sbatch --wait --parsable` as the engine's one process), so what is tested is the
engine's lifecycle of a job, whatever runner plans it.

The engine runs in a forked child, as ddptui runs beside a cluster: it makes itself a child subreaper, and in this
test process, the parent of the fixture's slurmd, it would adopt the steps' daemonized slurmstepd and their
intermediate forks, which nobody then reaps (the job then hangs in COMPLETING: "Unable to destroy container")."""
from __future__ import annotations

import json
import multiprocessing
import os
import signal
import sys
from pathlib import Path

import pytest

from ddptui.runners import events as ev
from ddptui.runners import session as session_mod
from ddptui.runners.launch.plan import LaunchPlan, LogSource, ProcSpec, SlurmJob
from ddptui.runners.launch.profile.load import adhoc_profile
from ddptui.runners.launch.rankenv import base_env
from ddptui.runners.session import Session
from tests.support.slurm_cluster import free_ports
from tests.support.wait import wait_until

pytestmark = pytest.mark.main_suite("a real Slurm cluster whose tasks run the test's own interpreter")

FIXTURES = Path(__file__).resolve().parent / "fixtures"


_TASK_ENV = ("bash", "-c", 'export RANK=$SLURM_PROCID WORLD_SIZE=$SLURM_NTASKS LOCAL_RANK=$SLURM_LOCALID; exec "$@"', "_")


def step_plan(job_id: str):
    """An srun step inside the user's allocation `job_id` (SLURM_JOB_ID set, as inside salloc)."""
    def plan(profile, run_dir: Path, script: Path, dashboard_pid) -> LaunchPlan:
        out = run_dir / "slurm"
        out.mkdir(parents=True, exist_ok=True)
        name = f"ddptui-{run_dir.name}"
        env = {**base_env(profile, dashboard_pid), "SLURM_JOB_ID": job_id, "MASTER_ADDR": "127.0.0.1",
               "MASTER_PORT": str(free_ports(1)[0])}
        argv = ("srun", f"--job-name={name}", "--nodes=2", "--ntasks=2", "--ntasks-per-node=1",
                f"--output={out}/rank%t.out", f"--error={out}/rank%t.err", *_TASK_ENV, sys.executable, str(script))
        proc = ProcSpec("srun", argv, env, str(run_dir), (0, 1), str(run_dir / "raw" / "srun.out"),
                        str(run_dir / "raw" / "srun.err"))
        sources = [LogSource(str(out / f"rank{r}.{s}"), r, s) for r in (0, 1) for s in ("out", "err")]
        return LaunchPlan("env", 2, (proc,), tuple(sources), (), SlurmJob("step", "srun", name, job_id))
    return plan


def sbatch_plan(profile, run_dir: Path, script: Path, dashboard_pid) -> LaunchPlan:
    """Two nodes, one rank each: an sbatch --wait of a batch script whose srun writes every rank's own files."""
    out = run_dir / "slurm"
    out.mkdir(parents=True, exist_ok=True)
    port = free_ports(1)[0]
    batch = out / "job.sbatch"
    batch.write_text(
        "#!/bin/bash\n"
        f"export MASTER_ADDR=127.0.0.1 MASTER_PORT={port}\n"
        f"srun --output={out}/rank%t.out --error={out}/rank%t.err bash -c "
        "'export RANK=$SLURM_PROCID WORLD_SIZE=$SLURM_NTASKS LOCAL_RANK=$SLURM_LOCALID; exec \"$@\"' _ "
        f"{sys.executable} {script}\n")
    name = f"ddptui-{run_dir.name}"
    argv = ("sbatch", "--wait", "--parsable", f"--job-name={name}", f"--output={out}/batch.out", "--nodes=2",
            "--ntasks-per-node=1", str(batch))
    proc = ProcSpec("sbatch", argv, base_env(profile, dashboard_pid), str(run_dir), (0, 1),
                    str(run_dir / "raw" / "sbatch.out"), str(run_dir / "raw" / "sbatch.err"))
    sources = [LogSource(str(out / f"rank{r}.{s}"), r, s) for r in (0, 1) for s in ("out", "err")]
    sources.append(LogSource(str(out / "batch.out"), None, "out"))  # the batch script's and srun's own lines
    return LaunchPlan("env", 2, (proc,), tuple(sources), (), SlurmJob("sbatch", "srun", name, None, str(batch)))


class Engine:
    """A Session in a forked child; what it decided is read back from its run record (events.jsonl, summary.json)."""

    def __init__(self, profile, runs_dir: Path, script: Path, planner=None) -> None:
        self.profile, self.runs_dir, self.script = profile, runs_dir, script
        self.planner = planner or sbatch_plan
        self.proc = multiprocessing.get_context("fork").Process(target=self._child, daemon=False)

    def _child(self) -> None:
        session_mod.make_plan = lambda p, run_dir, port, pid=None: self.planner(p, run_dir, self.script, pid)
        session = Session(self.profile, self.runs_dir)
        signal.signal(signal.SIGTERM, lambda *_: session.request_stop())
        os._exit(session.run())

    def start(self) -> "Engine":
        self.proc.start()
        return self

    @property
    def run_dir(self) -> Path | None:
        found = sorted(self.runs_dir.iterdir())
        return found[0] if found else None

    def events(self, kind: str | None = None) -> list:
        d = self.run_dir
        if d is None or not (d / "events.jsonl").exists():
            return []
        out = []
        for line in (d / "events.jsonl").read_text().splitlines():
            try:
                e = ev.from_json(json.loads(line))
            except ValueError:
                continue  # a line being written
            if kind is None or e.kind == kind:
                out.append(e)
        return out

    def lines(self, rank: int) -> list[str]:
        d = self.run_dir
        f = d / f"rank{rank}.log" if d is not None else None
        return f.read_text().splitlines() if f is not None and f.exists() else []

    def launcher(self) -> list[str]:
        d = self.run_dir
        return (d / "launcher.log").read_text().splitlines() if d is not None else []

    def stop(self) -> None:
        os.kill(self.proc.pid, signal.SIGTERM)

    def wait(self, timeout: float) -> int:
        self.proc.join(timeout)
        assert self.proc.exitcode is not None, f"the engine did not end within {timeout:.0f} s"
        return self.proc.exitcode

    def summary(self) -> dict:
        return json.loads((self.run_dir / "summary.json").read_text())


@pytest.fixture
def slurm_engine(slurm_clean, monkeypatch, runs_dir):
    """An Engine whose plan is sbatch_plan of the given rank script, on the test cluster (SLURM_CONF)."""
    monkeypatch.setenv("SLURM_CONF", slurm_clean.env["SLURM_CONF"])
    made = []

    def make(script: str, *overrides: str, planner=None) -> Engine:
        path = FIXTURES / script
        profile = adhoc_profile([sys.executable, str(path)], ["nproc=1", "nnodes=2", "replica_check=false",
                                                               *overrides])
        made.append(Engine(profile, runs_dir, path, planner))
        return made[-1]
    yield make
    for e in made:
        if e.proc.is_alive():
            e.proc.kill()
            e.proc.join(10)


def hold_both_nodes(cluster, seconds: int) -> str:
    """Another user's job on both nodes for `seconds`: ours pends behind it (Resources)."""
    r = cluster.run(["sbatch", "--parsable", "--nodes=2", "--exclusive", "--job-name=holder",
                     f"--output={cluster.root}/holder.out", "--wrap", f"sleep {seconds}"], check=True)
    jid = r.stdout.strip().split(";")[0]
    wait_until(lambda: cluster.job_state(jid) == "RUNNING", 30, "the holder job running")
    return jid


@pytest.mark.timeout(150)
def test_pending_job_is_shown_then_runs_to_completion_without_a_stall(slurm_engine, slurm_clean):
    # startup_grace 10 s while the job pends ~18 s: the ranks' stall clock must not run while it pends (a rank that is
    # not there uses no CPU: without the pause the stall would be said at 10 s, the ranks not even started)
    engine = slurm_engine("srun_plain_ddp.py", "startup_grace=10", "stall_after=5")
    hold_both_nodes(slurm_clean, 18)
    code = engine.start().wait(120)
    states = [(e.state, e.reason, e.nodes) for e in engine.events("job_state")]
    # right after submission Slurm's reason is "None" (shown as "") until its scheduler has looked at the job
    assert states and states[0][0] == "PENDING", states
    assert any(st == "PENDING" and why in ("Resources", "Priority") for st, why, _ in states), states
    running = [s for s in states if s[0] == "RUNNING"]
    assert running and running[0][2] == ("n1", "n2"), states
    assert states[-1][0] == "COMPLETED", states
    assert not engine.events("stall"), [e.reason for e in engine.events("stall")]
    assert code == 0, "\n".join(engine.launcher())
    s = engine.summary()
    assert s["job"]["state"] == "COMPLETED" and s["job"]["nodes"] == ["n1", "n2"]
    assert any("step 14" in ln for ln in engine.lines(1)), engine.lines(1)[-5:]


@pytest.mark.timeout(150)
def test_stop_scancels_a_running_job_and_leaves_nothing(slurm_engine, slurm_clean):
    engine = slurm_engine("train_ddp_long.py").start()
    wait_until(lambda: any(" step 3 " in ln for ln in engine.lines(0) + engine.lines(1)), 90, "training on both nodes")
    engine.stop()
    code = engine.wait(60)
    s = engine.summary()
    assert code == 1 and s["status"] == "stopped"
    assert any("ddptui: scancel job " in ln for ln in engine.launcher()), engine.launcher()
    assert s["job"]["state"] == "CANCELLED" and s["job"]["cancelled_by_ddptui"], s["job"]
    assert engine.events("job_state")[-1].state == "CANCELLED"
    assert slurm_clean.jobs() == []  # nothing RUNNING or COMPLETING once the engine returned
    assert slurm_clean.steps_left() == []


@pytest.mark.timeout(150)
def test_stop_while_pending_scancels_the_job_before_it_runs(slurm_engine, slurm_clean):
    engine = slurm_engine("train_ddp_long.py")
    holder = hold_both_nodes(slurm_clean, 60)
    try:
        engine.start()
        wait_until(lambda: any(e.state == "PENDING" for e in engine.events("job_state")), 60, "the job pending")
        engine.stop()
        code = engine.wait(60)
    finally:
        slurm_clean.run(["scancel", holder])
    s = engine.summary()
    assert code == 1 and s["status"] == "stopped"
    assert s["job"]["state"] == "CANCELLED", s["job"]
    assert not any(e.state == "RUNNING" for e in engine.events("job_state"))
    assert not engine.events("rank_hello")


@pytest.mark.timeout(150)
def test_stop_of_a_step_cancels_the_step_and_leaves_the_users_allocation(slurm_engine, slurm_clean):
    r = slurm_clean.run(["salloc", "--no-shell", "--nodes=2", "--ntasks-per-node=1", "--job-name=user-alloc"],
                        timeout=60)
    alloc = next((w for w in r.stderr.split() if w.isdigit()), None)
    assert alloc, r.stderr
    try:
        engine = slurm_engine("train_ddp_long.py", planner=step_plan(alloc)).start()
        wait_until(lambda: any(" step 3 " in ln for ln in engine.lines(1)), 90, "the step training")
        engine.stop()
        code = engine.wait(60)
        assert code == 1 and engine.summary()["status"] == "stopped"
        assert any(f"ddptui: scancel step {alloc}." in ln for ln in engine.launcher()), engine.launcher()
        assert slurm_clean.job_state(alloc) == "RUNNING"  # the allocation is the user's: only our step ended
        steps = slurm_clean.run(["squeue", "-h", "-s", "-j", alloc, "-o", "%i"]).stdout.split()
        assert not [x for x in steps if not x.endswith(".extern")], steps
    finally:
        slurm_clean.run(["scancel", alloc])


@pytest.mark.timeout(150)
def test_a_node_slurm_takes_down_under_the_job_is_a_node_lost(slurm_engine, slurm_clean):
    engine = slurm_engine("train_ddp_long.py").start()
    try:
        wait_until(lambda: any(" step 3 " in ln for ln in engine.lines(1)), 90, "training on both nodes")
        slurm_clean.run(["scontrol", "update", "NodeName=n2", "State=DOWN", "Reason=ddptui-test"], check=True)
        code = engine.wait(90)
    finally:
        slurm_clean.run(["scontrol", "update", "NodeName=n2", "State=RESUME"])
        wait_until(lambda: "n2 idle" in slurm_clean.sinfo(), 60, "n2 back idle")
    assert code == 1, "\n".join(engine.launcher()[-20:])
    lost = engine.events("node_lost")
    assert [(e.node, e.ranks) for e in lost] == [("n2", (1,))], (lost, [e.state for e in engine.events("job_state")])
    s = engine.summary()
    # an admin's DOWN ends the job CANCELLED "due to node failure" (a node that stops answering: NODE_FAIL, after
    # SlurmdTimeout); srun's "Node failure on n2" names the node either way
    assert s["job"]["state"] in ("CANCELLED", "NODE_FAIL") and s["status"] == "failed", s["job"]
    assert s["crash"]["text"].startswith("node n2 lost"), s["crash"]["text"]
