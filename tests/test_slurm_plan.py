"""The slurm runner's plans (sbatch script, srun step, ad-hoc srun, torchrun per node) and torchrun's c10d plan:
argv, script text, env and log sources; the port hand-over between real bash tasks; --dry-run's text."""
from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from ddptui.runners.launch import slurm

from ddptui.runners.launch import srun_argv
from ddptui.runners.launch.profile.load import adhoc_profile, load_profile
from ddptui.runners.launch.profile.find import find_profile
from ddptui.runners.launch.rankenv import INJECT_DIR
from ddptui.runners.session import make_plan, rendezvous_port
from ddptui.runners.launch.torchrun import plan as torchrun_plan

pytestmark = [
    pytest.mark.main_suite(
        "its ad-hoc srun runs the test's own interpreter on a real Slurm cluster"),
    pytest.mark.timeout(60),
]
ROOT = Path(__file__).resolve().parent.parent


def shipped(name: str, *overrides: str):
    return load_profile(find_profile(name), list(overrides))


# ---------------------------------------------------------------- decisions

@pytest.mark.parametrize("submit,env,want", [
    ("auto", {}, ("sbatch", None)),
    ("auto", {"SLURM_JOB_ID": "41"}, ("step", "41")),
    ("sbatch", {"SLURM_JOB_ID": "41"}, ("sbatch", None)),
    ("step", {"SLURM_JOB_ID": "41"}, ("step", "41")),
    ("auto", {"SLURM_JOB_ID": ""}, ("sbatch", None)),
])
def test_submit_mode(submit, env, want):
    assert slurm.submit_mode(submit, env) == want


@pytest.mark.parametrize("argv,start,name,out", [
    (["srun", "-N2", "--ntasks-per-node=1", "python", "t.py", "-N", "9"], 3, None, False),
    (["srun", "--nodes", "2", "-J", "mine", "--label", "python", "t.py"], 6, "mine", True),
    (["srun", "-o", "x.%t", "--", "python"], 4, None, True),
    (["srun", "-Jfoo", "-u", "hostname"], 3, "foo", False),
    (["srun", "--job-name=a", "--job-name=b", "true"], 3, "b", False),
    (["srun", "-N2"], 2, None, False),
])
def test_srun_argv(argv, start, name, out):
    assert srun_argv.program_start(argv) == start
    assert srun_argv.value(argv, srun_argv.JOB_NAME_FLAGS) == name
    assert srun_argv.has(argv, srun_argv.OUTPUT_FLAGS) is out


# ---------------------------------------------------------------- sbatch

def test_sbatch_plan_submits_a_job_whose_batch_script_is_the_engine(tmp_path, monkeypatch):
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    run = tmp_path / "20261203-120000-slurm-ddp"
    sets = ("slurm.partition=debug", "slurm.time=5", "slurm.sbatch_args=--exclusive --requeue")
    p = shipped("slurm-ddp", *sets)
    plan = make_plan(p, run, rendezvous_port(p), 4242)
    (proc,) = plan.procs
    assert plan.runner == "slurm" and plan.world_size == 2 and proc.name == "sbatch" and plan.sources == ()
    assert list(proc.argv) == ["sbatch", "--parsable", "--job-name=ddptui-20261203-120000-slurm-ddp",
                               f"--output={run}/slurm/batch.out", "--open-mode=append", "--nodes=2",
                               "--ntasks-per-node=1", "--partition=debug", "--time=5", "--exclusive", "--requeue",
                               f"{run}/slurm/job.sbatch"]
    job = plan.job
    assert (job.mode, job.launch, job.name, job.job_id, job.script, job.attempt) == (
        "sbatch", "srun", "ddptui-20261203-120000-slurm-ddp", None, f"{run}/slurm/job.sbatch", None)
    lines = job.script_text.splitlines()
    assert lines[0] == "#!/bin/bash" and 'export DDPTUI_SLURM_ENGINE="$SLURM_JOB_ID"' in lines
    engine = shlex.split(lines[-1])
    assert engine[0] == "exec" and engine[2:6] == ["-m", "ddptui.tui.cli", "--no-ui", "--record"]
    assert engine[6] == str(run) and engine[-1] == os.path.abspath(p.source)
    assert [engine[i + 1] for i, w in enumerate(engine) if w == "--set"] == list(sets)


def test_the_engine_in_the_job_runs_a_step_and_a_requeue_is_its_next_attempt(tmp_path):
    """Inside the job it submitted (DDPTUI_SLURM_ENGINE = SLURM_JOB_ID) the profile's submit: sbatch and sbatch_args
    give way to a step of that job; SLURM_RESTART_COUNT names the attempt, whose files are its own."""
    run = tmp_path / "run"
    p = shipped("slurm-ddp", "slurm.submit=sbatch", "slurm.sbatch_args=--requeue")
    env = {"SLURM_JOB_ID": "7", "DDPTUI_SLURM_ENGINE": "7"}
    first = slurm.plan(p, run, 0, 1, environ=env)
    assert (first.job.mode, first.job.job_id, first.job.attempt) == ("step", "7", 0)
    assert [s.path for s in first.sources][:2] == [f"{run}/slurm/rank0.out", f"{run}/slurm/rank0.err"]
    again = slurm.plan(p, run, 0, 1, environ={**env, "SLURM_RESTART_COUNT": "2"})
    (proc,) = again.procs
    assert again.job.attempt == 2 and proc.stdout == f"{run}/raw/srun-attempt2.out"
    assert f"--output={run}/slurm/attempt2/rank%t.out" in proc.argv
    assert f"{run}/slurm/attempt2/port." in proc.argv[proc.argv.index("-c") + 1]
    assert {s.path for s in again.sources} == {f"{run}/slurm/attempt2/rank{r}.{x}" for r in (0, 1)
                                               for x in ("out", "err")}
    assert any("attempt 2 (Slurm requeued the job" in n for n in again.notes)
    slurm.prepare(again, run)
    assert (run / "slurm" / "attempt2").is_dir()
    other = slurm.plan(p, run, 0, 1, environ={"SLURM_JOB_ID": "8", "DDPTUI_SLURM_ENGINE": "7"})
    assert other.job.mode == "sbatch"  # another job's engine mark: not this job's engine


def test_torchrun_launch_in_the_job(tmp_path):
    run = tmp_path / "r"
    p = shipped("slurm-torchrun", "nproc=2", "slurm.port=29555")
    forced = slurm.plan(p, run, 0, 1, environ={"SLURM_JOB_ID": "99"})  # submit sbatch: a job of its own
    assert forced.job.mode == "sbatch" and forced.job.launch == "torchrun" and forced.world_size == 4
    plan = slurm.plan(p, run, 0, 1, environ={"SLURM_JOB_ID": "99", "DDPTUI_SLURM_ENGINE": "99"})
    srun = list(plan.procs[0].argv)
    assert srun[:1] + srun[2:8] == ["srun", "--nodes=2", "--ntasks=2", "--ntasks-per-node=1", "--cpus-per-task=2",
                        f"--output={run}/slurm/agent%n.out", f"--error={run}/slurm/agent%n.err"]
    wrapper = srun[10]
    assert "port=29555\n" in wrapper and "pf=" not in wrapper
    for piece in ("-m torch.distributed.run --nnodes=2 --nproc-per-node=2 --rdzv-backend=c10d",
                  '--rdzv-endpoint="${addr:-$first}:$port"', '--rdzv-id="$SLURM_JOB_ID"',
                  '--local-addr="${own:-$SLURMD_NODENAME}"', f'--log-dir={run}/torchrun/node"$SLURM_NODEID"',
                  '--redirects=3 "$@"'):
        assert piece in wrapper, piece
    assert srun[12:] == [p.workload.script_path]
    by_rank = {(s.rank, s.stream): s for s in plan.sources if s.rank is not None}
    assert len(by_rank) == 8 and all(s.learn_rank for s in by_rank.values())  # c10d: node rank = arrival order
    assert by_rank[(3, "out")].path == f"{run}/torchrun/node1/*/attempt_*/1/stdout.log"
    launcher = sorted(s.path for s in plan.sources if s.rank is None)
    assert launcher == sorted([f"{run}/slurm/agent0.out", f"{run}/slurm/agent0.err", f"{run}/slurm/agent1.out",
                               f"{run}/slurm/agent1.err"])


# ---------------------------------------------------------------- steps

def test_step_plan_inside_an_allocation(tmp_path):
    run = tmp_path / "r1"
    p = shipped("slurm-ddp", "slurm.partition=debug")
    plan = slurm.plan(p, run, 0, 77, environ={"SLURM_JOB_ID": "512"})
    (proc,) = plan.procs
    assert (plan.job.mode, plan.job.job_id, plan.job.name, plan.job.script) == ("step", "512", "ddptui-r1", None)
    assert proc.name == "srun" and proc.argv[:2] == ("srun", "--job-name=ddptui-r1")
    assert f"--output={run}/slurm/rank%t.out" in proc.argv and proc.argv[-2:] == ("-u", p.workload.script_path)
    assert proc.env["DDPTUI"] == "1" and proc.env["DDPTUI_PID"] == "77"  # srun exports them to the tasks
    assert proc.stdout == f"{run}/raw/srun.out"
    assert any("not applied to the step" in n for n in plan.notes)
    assert [s.rank for s in plan.sources] == [0, 0, 1, 1]


def test_adhoc_srun_gets_rank_files_and_a_name(tmp_path):
    run = tmp_path / "r2"
    p = adhoc_profile(["srun", "-N2", "--ntasks-per-node=1", "python", "train.py", "--lr", "1"])
    plan = slurm.plan(p, run, 0, 5, environ={})
    (proc,) = plan.procs
    argv = list(proc.argv)
    assert argv[:6] == ["srun", "--job-name=ddptui-r2", f"--output={run}/slurm/rank%t.out",
                        f"--error={run}/slurm/rank%t.err", "-N2", "--ntasks-per-node=1"]
    assert argv[6:8] == ["bash", "-c"] and argv[9:] == ["_", "python", "train.py", "--lr", "1"]
    assert 'MASTER_PORT="$port"' in argv[8] and 'port="${MASTER_PORT:-}"' in argv[8]  # a user's own port wins
    assert (plan.job.mode, plan.job.job_id, plan.job.name) == ("step", None, "ddptui-r2")
    assert [s.rank for s in plan.sources] == [0, 0, 1, 1]


def test_adhoc_srun_with_its_own_output_is_read_by_label(tmp_path):
    p = adhoc_profile(["srun", "-J", "mine", "-o", "out.%t", "-n2", "python", "t.py"])
    plan = slurm.plan(p, tmp_path / "r3", 0, 5, environ={"SLURM_JOB_ID": "3"})
    argv = list(plan.procs[0].argv)
    assert argv[:7] == ["srun", "--label", "-J", "mine", "-o", "out.%t", "-n2"] and argv[-3:] == ["_", "python", "t.py"]
    assert plan.sources == () and (plan.job.name, plan.job.job_id) == ("mine", "3")
    assert any("'N: ' label" in n and "added --label" in n for n in plan.notes)
    already = slurm.plan(adhoc_profile(["srun", "-l", "python", "t.py"]), tmp_path / "r4", 0, 5, environ={})
    assert already.procs[0].argv.count("--label") == 0 and already.sources == ()


# ---------------------------------------------------------------- the port, between real bash tasks

def test_task0_hands_its_free_port_to_the_others(tmp_path):
    """Task 0 binds a free port on the first node and writes it into the run directory; the others wait for it."""
    p = shipped("slurm-ddp")
    (tmp_path / "slurm").mkdir()
    text = slurm.port_lines(p, tmp_path / "slurm") + 'echo "$port"'
    # as in an srun task that ddptui started: its activation is there, and a task of a step counts as a rank
    env = {**os.environ, "SLURM_JOB_ID": "8", "SLURM_STEP_ID": "0", "SLURM_NTASKS": "2", "SLURM_LOCALID": "0",
           "DDPTUI": "1", "PYTHONPATH": str(INJECT_DIR)}
    waiter = subprocess.Popen(["bash", "-c", text], env={**env, "SLURM_PROCID": "1"}, stdout=subprocess.PIPE,
                              text=True)
    first = subprocess.run(["bash", "-c", text], env={**env, "SLURM_PROCID": "0"}, capture_output=True, text=True,
                           timeout=30)
    got = waiter.communicate(timeout=30)[0].strip()
    assert first.returncode == 0 and waiter.returncode == 0
    assert got == first.stdout.strip() and 1024 <= int(got) <= 65535
    assert (tmp_path / "slurm" / "port.8.0").read_text().strip() == got
    own = subprocess.run(["bash", "-c", slurm.port_lines(p, tmp_path / "slurm", unless_set="MASTER_PORT") + 'echo "$port"'],
                         env={**env, "SLURM_PROCID": "1", "MASTER_PORT": "4321"}, capture_output=True, text=True,
                         timeout=30)
    assert own.stdout.strip() == "4321"


def test_prepare_writes_the_batch_script(tmp_path, monkeypatch):
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    plan = slurm.plan(shipped("slurm-ddp"), tmp_path / "run", 0, 1)
    slurm.prepare(plan, tmp_path / "run")
    script = Path(plan.job.script)
    assert script.read_text() == plan.job.script_text and os.access(script, os.X_OK)
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0  # the shell reads it
    step = slurm.plan(shipped("slurm-ddp"), tmp_path / "run2", 0, 1, environ={"SLURM_JOB_ID": "1"})
    slurm.prepare(step, tmp_path / "run2")
    assert sorted(os.listdir(tmp_path / "run2")) == ["slurm"]


# ---------------------------------------------------------------- torchrun c10d

def test_torchrun_c10d_plan(tmp_path):
    run = tmp_path / "20261203-1-multinode-torchrun"
    p = shipped("multinode-torchrun", "local_addr=127.0.0.1")
    plan = torchrun_plan(p, run, 29477)
    assert len(plan.procs) == 2
    for node, proc in enumerate(plan.procs):
        argv = list(proc.argv)
        i = argv.index("--nnodes")
        assert argv[i:i + 10] == ["--nnodes", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint", "127.0.0.1:29477",
                                  "--rdzv-id", run.name, "--local-addr", "127.0.0.1"]
        assert "--node-rank" not in argv and "--standalone" not in argv
        assert f"{run}/torchrun/node{node}" in argv
    assert all(s.learn_rank for s in plan.sources)
    assert any("c10d rendezvous at 127.0.0.1:29477" in n for n in plan.notes)
    mine = torchrun_plan(shipped("multinode-torchrun", "rdzv_id=mine", "rdzv_endpoint=localhost:29478"), run, 29478)
    assert "localhost:29478" in mine.procs[0].argv and "mine" in mine.procs[0].argv
    static = torchrun_plan(shipped("multinode-torchrun", "rdzv_backend=static"), run, 29479)
    assert "--node-rank" in static.procs[1].argv and not any(s.learn_rank for s in static.sources)


def test_rendezvous_port_of_an_endpoint():
    assert rendezvous_port(shipped("multinode-torchrun", "rdzv_endpoint=127.0.0.1:29466")) == 29466
    assert rendezvous_port(shipped("slurm-ddp")) == 0  # chosen on the job's first node


# ---------------------------------------------------------------- --dry-run

def test_dry_run_prints_the_batch_script(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    out = subprocess.run([sys.executable, "-m", "ddptui.tui.cli", "slurm-torchrun", "--dry-run", "--runs-dir",
                          str(tmp_path)], cwd=ROOT, capture_output=True, text=True, timeout=60, env=env)
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "argv: sbatch --parsable" in text
    assert "slurm: sbatch (sbatch, its engine in the job), launch torchrun, job name ddptui-<time>-slurm-torchrun" \
        in text
    assert "  | #!/bin/bash" in text and "-m ddptui.tui.cli --no-ui --record" in text
    assert not list(tmp_path.iterdir())  # nothing written
    step = subprocess.run([sys.executable, "-m", "ddptui.tui.cli", "slurm-ddp", "--dry-run"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60, env={**env, "SLURM_JOB_ID": "5"})
    assert step.returncode == 0 and "[srun] ranks 0,1" in step.stdout and "env:  DDPTUI=1" in step.stdout
    assert "slurm: step (an srun step), launch srun" in step.stdout and "job id 5" in step.stdout


# ---------------------------------------------------------------- srun --label: no per-rank files

def test_srun_label_prefix_names_the_task():
    from ddptui.runners.evidence import parse

    assert parse.split_prefix("0: step 3 loss 1.0") == (0, "step 3 loss 1.0")
    assert parse.split_prefix(" 7: x") == (7, "x") and parse.split_prefix("12: @ddptui {}") == (12, "@ddptui {}")
    assert parse.split_prefix("12:30:01 started") == (None, "12:30:01 started")
    assert parse.split_prefix("  File \"t.py\", line 3") == (None, "  File \"t.py\", line 3")


@pytest.mark.timeout(240)
def test_labelled_adhoc_srun_is_read_from_srun_itself(slurm_clean, runs_dir):
    """Without per-rank files (the command's own --label: no shared run directory needed), every line comes back
    through ddptui's own srun, and its `N: ` label says whose it is: hellos, steps and digests of both ranks."""
    cmd = [sys.executable, "-m", "ddptui.tui.cli", "--runs-dir", str(runs_dir), "--no-ui", "--", "srun", "--label",
           "-N2", "--ntasks-per-node=1", sys.executable, str(ROOT / "tests" / "fixtures" / "srun_plain_ddp.py")]
    env = slurm_clean.node_env({"MASTER_PORT": str(slurm_clean.free_port()),
                                "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"})
    out = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=200)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    (run,) = list(runs_dir.iterdir())
    assert json.loads((run / "plan.json").read_text())["sources"] == []
    for r in (0, 1):
        assert "step 14 loss" in (run / f"rank{r}.log").read_text(), r
    summary = json.loads((run / "summary.json").read_text())
    assert summary["replica"]["status"] == "identical", summary["replica"]
