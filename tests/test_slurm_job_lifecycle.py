"""The engine follows and ends a real Slurm job (tests/support/slurm_cluster.py's cluster): the job's states as events,
a stop of a step cancels the step only, a node Slurm takes down is a node lost. The plan is written here (an srun step
inside an allocation, as the engine inside a ddptui batch job runs its ranks), so what is tested is the engine's
lifecycle of a job, whatever runner plans it. (The submitter's side, pending and stop before the engine started: tests/
test_slurm_follow.py.)

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


class Engine:
    """A Session in a forked child; what it decided is read back from its run record (events.jsonl, summary.json)."""

    def __init__(self, profile, runs_dir: Path, script: Path, planner) -> None:
        self.profile, self.runs_dir, self.script = profile, runs_dir, script
        self.planner = planner
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
    """An Engine whose plan is `planner` (step_plan in an allocation) of the given rank script, on the test cluster (SLURM_CONF)."""
    monkeypatch.setenv("SLURM_CONF", slurm_clean.env["SLURM_CONF"])
    made = []

    def make(script: str, *overrides: str, planner) -> Engine:
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
    """The engine as it runs inside its batch job: the ranks a step of the job's allocation."""
    r = slurm_clean.run(["salloc", "--no-shell", "--nodes=2", "--ntasks-per-node=1", "--job-name=ddptui-alloc"],
                        timeout=60)
    alloc = next((w for w in r.stderr.split() if w.isdigit()), None)
    assert alloc, r.stderr
    engine = slurm_engine("train_ddp_long.py", planner=step_plan(alloc)).start()
    try:
        wait_until(lambda: any(" step 3 " in ln for ln in engine.lines(1)), 90, "training on both nodes")
        slurm_clean.run(["scontrol", "update", "NodeName=n2", "State=DOWN", "Reason=ddptui-test"], check=True)
        code = engine.wait(90)
    finally:
        slurm_clean.run(["scancel", alloc])
        slurm_clean.run(["scontrol", "update", "NodeName=n2", "State=RESUME"])
        wait_until(lambda: "n2 idle" in slurm_clean.sinfo(), 60, "n2 back idle")
    assert code == 1, "\n".join(engine.launcher()[-20:])
    lost = engine.events("node_lost")
    assert [(e.node, e.ranks) for e in lost] == [("n2", (1,))], (lost, [e.state for e in engine.events("job_state")])
    s = engine.summary()
    # srun's "Node failure on n2" names the node; the job is the allocation the step ran in, which Slurm ends after
    # the engine wrote its summary (an engine inside its job cannot see its job's last state)
    assert s["job"]["id"] == alloc and s["status"] == "failed", s["job"]
    assert s["crash"]["text"].startswith("node n2 lost"), s["crash"]["text"]
