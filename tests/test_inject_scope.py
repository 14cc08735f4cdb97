"""Only the rank is instrumented; what it starts, and a wrapped command's ranks, see the user's own environment."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ddptui.runners import events as ev
from ddptui.runners.launch.profile.load import adhoc_profile, load_profile
from ddptui.runners.launch.rankenv import INJECT_DIR, activation, base_env
from ddptui.runners.launch.registry import runner_for
from tests.support.engine import Recorder, strict_reports
from tests.support.wait import wait_until

pytestmark = pytest.mark.main_suite("its wrapped torchrun and rank programs run on the test's own interpreter")

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
sys.path.insert(0, str(INJECT_DIR))
import ddptui_scope as scope  # noqa: E402

ACTIVATION = ("DDPTUI", "DDPTUI_PID", "DDPTUI_XLA", "DDPTUI_USER_ENV")


# ---------------------------------------------------------------- decisions (pure)

@pytest.mark.parametrize("environ,argv,orig,expect", [
    ({}, ["x.py"], ["python", "x.py"], "off"),
    ({"DDPTUI": "0", "RANK": "0"}, ["x.py"], ["python", "x.py"], "off"),
    ({"DDPTUI": "1", "RANK": "0"}, ["x.py"], ["python", "x.py"], "rank"),
    ({"DDPTUI": "1", "RANK": "0"}, ["-m"], ["python", "-m", "pkg.train"], "rank"),
    ({"DDPTUI": "1"}, ["/v/bin/torchrun"], ["python", "/v/bin/torchrun", "x.py"], "launcher"),
    ({"DDPTUI": "1", "RANK": "1"}, ["/v/bin/torchrun"], ["python", "/v/bin/torchrun", "x.py"], "launcher"),
    ({"DDPTUI": "1"}, ["-m"], ["python", "-m", "torch.distributed.run", "x.py"], "launcher"),
    ({"DDPTUI": "1", "DDPTUI_XLA": "1"}, ["x.py"], ["python", "x.py"], "rank"),
    ({"DDPTUI": "1", "DDPTUI_XLA": "1"}, ["-c"],
     ["python", "-c", "from multiprocessing.spawn import spawn_main; spawn_main()", "--multiprocessing-fork"], "rank"),
    ({"DDPTUI": "1", "DDPTUI_XLA": "1"}, ["-c"],
     ["python", "-c", "from multiprocessing.resource_tracker import main;main(5)"], "helper"),
    ({"DDPTUI": "1"}, ["standin_mirage.py"], ["python", "standin_mirage.py", "run", "--", "torchrun"], "launcher"),
    ({"DDPTUI": "1", "SLURM_PROCID": "1", "SLURM_STEP_ID": "0"}, ["x.py"], ["python", "x.py"], "rank"),
    ({"DDPTUI": "1", "SLURM_PROCID": "0"}, ["x.py"], ["python", "x.py"], "launcher"),
    ({"DDPTUI": "1", "SLURM_PROCID": "0", "SLURM_STEP_ID": "0"}, ["/v/bin/torchrun"],
     ["python", "/v/bin/torchrun", "x.py"], "launcher"),
], ids=["unset", "DDPTUI=0", "rank-script", "rank-module", "torchrun-agent", "agent-with-RANK", "python-m-run",
        "xla-program", "xla-spawn-worker", "resource-tracker", "wrapper-without-RANK", "srun-task",
        "batch-script-python", "torchrun-agent-as-srun-task"])
def test_role(environ, argv, orig, expect):
    assert scope.role(environ, argv, orig) == expect


def test_launcher_var_takes_slurms_task_variables_only_in_a_step():
    task = {"SLURM_PROCID": "3", "SLURM_NTASKS": "4", "SLURM_LOCALID": "1", "SLURM_STEP_ID": "0"}
    assert [scope.launcher_var(task, n) for n in ("RANK", "WORLD_SIZE", "LOCAL_RANK")] == ["3", "4", "1"]
    assert scope.launcher_var({**task, "RANK": "7"}, "RANK") == "7"  # torch's variable wins
    batch = {k: v for k, v in task.items() if k != "SLURM_STEP_ID"}
    assert scope.launcher_var(batch, "RANK") is None
    assert scope.launcher_var(task, "MASTER_ADDR") is None


def test_user_env_restores_saved_values_and_drops_the_activation():
    given = {"DDPTUI": "1", "DDPTUI_PID": "7", "RANK": "0", "OMP_NUM_THREADS": "1", "DDPTUI_TEST_TOKEN": "t",
             "PYTHONPATH": f"{INJECT_DIR}:/user/lib", "PYTHONUNBUFFERED": "1",
             "DDPTUI_USER_ENV": json.dumps({"PYTHONPATH": "/user/lib", "PYTHONUNBUFFERED": None})}
    env = dict(given)
    replaced = scope.apply(scope.user_env(env), env)
    assert env == {"RANK": "0", "OMP_NUM_THREADS": "1", "DDPTUI_TEST_TOKEN": "t", "PYTHONPATH": "/user/lib"}
    assert scope.apply(replaced, env) and env == given  # undone exactly (the XLA launcher's window)


def test_user_env_without_a_saved_copy_takes_our_folder_off_pythonpath():
    env = {"DDPTUI": "1", "RANK": "0", "PYTHONPATH": f"/a{os.pathsep}{INJECT_DIR}"}
    assert scope.user_env(env) == {"DDPTUI": None, "PYTHONPATH": "/a"}
    assert scope.user_env({"DDPTUI": "1", "PYTHONPATH": str(INJECT_DIR)}) == {"DDPTUI": None, "PYTHONPATH": None}
    assert scope.user_env({"DDPTUI": "1", "DDPTUI_USER_ENV": "{not json"}) == {"DDPTUI": None, "DDPTUI_USER_ENV": None}


def test_activation_saves_the_users_plumbing(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", "/user/lib")
    monkeypatch.delenv("PYTHONUNBUFFERED", raising=False)
    a = activation({}, 42)
    assert a["PYTHONPATH"] == f"{INJECT_DIR}{os.pathsep}/user/lib" and a["DDPTUI_PID"] == "42"
    assert json.loads(a["DDPTUI_USER_ENV"]) == {"PYTHONPATH": "/user/lib", "PYTHONUNBUFFERED": None}
    # a profile's own PYTHONPATH is the user's value (and no longer replaces the injected folder)
    b = activation({"PYTHONPATH": "/prof"}, 42)
    assert b["PYTHONPATH"] == f"{INJECT_DIR}{os.pathsep}/prof"
    assert json.loads(b["DDPTUI_USER_ENV"])["PYTHONPATH"] == "/prof"


@pytest.mark.parametrize("cmd", [["torchrun", "--standalone", "--nproc_per_node=2", "t.py"], ["python", "t.py"]],
                         ids=["torchrun", "env"])
def test_a_wrapped_command_gets_only_namespaced_variables(monkeypatch, cmd):
    for var in ("OMP_NUM_THREADS", "PYTHONPATH", "PYTHONUNBUFFERED"):
        monkeypatch.delenv(var, raising=False)
    p = adhoc_profile(cmd, ["backend=gloo", "steps=5", "env.MINE=1"])
    assert p.rank_env() == {"MINE": "1"}  # the built-in workloads' knobs are for the built-in workloads
    added = set(runner_for(p.runner).base_env(p, 1)) - {"MINE"}  # what its runner adds
    launcher = {"OMP_NUM_THREADS"} if p.runner == "env" else set()  # ddptui is the env:// launcher: as torchrun
    assert added == {"PYTHONPATH", "PYTHONUNBUFFERED", *launcher} | {"DDPTUI", "DDPTUI_PID", "DDPTUI_USER_ENV",
                                                                   "DDPTUI_REPLICA_EVERY"}


def test_builtin_workloads_keep_their_knobs():
    e = base_env(load_profile(ROOT / "profiles" / "hang.yaml"), 1)
    assert e["DDP_BACKEND"] == "gloo" and e["DDP_STEPS"] == "1000" and e["DDP_FAULT"] == "hang:1:10:3600"


# ---------------------------------------------------------------- real processes

def _user_env(tmp_path: Path) -> dict[str, str]:
    lib = tmp_path / "userlib"
    lib.mkdir(exist_ok=True)
    return {"PYTHONPATH": str(lib)}


def _dumps(folder: Path) -> dict[str, dict]:
    return {p.stem: json.loads(p.read_text()) for p in folder.glob("*.json")}


@pytest.mark.timeout(180)
@pytest.mark.parametrize("runner", ["torchrun", "torchrun-module", "env"])
def test_rank_helpers_and_forked_workers_are_left_alone(tmp_path, monkeypatch, runner):
    dump = tmp_path / "envs"
    dump.mkdir()
    for k, v in _user_env(tmp_path).items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("PYTHONUNBUFFERED", raising=False)
    monkeypatch.setenv("ENV_DUMP_DIR", str(dump))
    script = str(FIXTURES / "ddp_helper_and_workers.py")
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
    if runner == "torchrun":
        profile = adhoc_profile([*torchrun, script])
    elif runner == "torchrun-module":  # `python -m` ranks, the module found through the user's PYTHONPATH
        (Path(os.environ["PYTHONPATH"]) / "helper_and_workers.py").write_text(Path(script).read_text())
        profile = adhoc_profile([*torchrun, "-m", "helper_and_workers"])
    else:
        profile = adhoc_profile([sys.executable, script], ["nproc=2"])
    from ddptui.runners.session import Session

    rec = Recorder()
    code = Session(profile, tmp_path / "runs", emit=rec).run()
    out = {r: "\n".join(rec.lines(r)) for r in (0, 1)}
    assert code == 0, out
    for r in (0, 1):
        m = re.search(rf"rank {r} pid (\d+) done 8 steps, helper said b'42\\n'", out[r])
        assert m, out[r]
        hellos = [h for h in rec.of(ev.RankHello) if h.rank == r]
        assert [h.pid for h in hellos] == [int(m.group(1))]  # the rank's own pid, from the rank only
        assert re.search(r"worker 1 of rank \d pid \d+", out[r])
    seen = _dumps(dump)
    assert set(seen) == {f"{who}-{r}" for r in (0, 1) for who in ("helper", "worker-0", "worker-1")}
    # one hello per rank, in its own output (none from a helper or a worker)
    run_dir = next((tmp_path / "runs").iterdir())
    raw = "".join(p.read_text() for p in run_dir.rglob("*") if p.is_file() and p.suffix in (".out", ".log")
                  and ("raw" in p.parts or "torchrun" in p.parts))
    reps = strict_reports("\n".join(ln[ln.index("@ddptui "):] for ln in raw.splitlines() if "@ddptui " in ln))
    assert sorted(x["r"] for x in reps if x["k"] == "hello") == [0, 1]
    assert {x["r"] for x in reps if x["k"] == "digest"} == {0, 1}
    for name, d in seen.items():
        env = d["env"]
        assert not [k for k in ACTIVATION if k in env], (name, sorted(k for k in env if k.startswith("DDPTUI")))
        assert env.get("PYTHONPATH") == os.environ["PYTHONPATH"], name
        assert "PYTHONUNBUFFERED" not in env, name


@pytest.mark.timeout(60)
def test_a_fork_child_of_a_rank_reports_nothing(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", *ACTIVATION)}
    env.update(activation({}, os.getpid()), DDPTUI="1", RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
    p = subprocess.run([sys.executable, str(FIXTURES / "fork_child_trains_and_raises.py")], env=env, cwd=tmp_path,
                       capture_output=True, text=True, timeout=50, start_new_session=True)
    assert p.returncode == 0, p.stderr
    assert re.search(r"child \d+ exit code 1", p.stdout)
    assert "RuntimeError: child failed on purpose" in p.stderr  # the child's own excepthook still prints
    reports = strict_reports(p.stdout)
    # the parent is the rank: its hello and its start-up phases; the child that trained and raised adds nothing
    assert [x["k"] for x in reports if x["k"] != "phase"] == ["hello"], p.stdout
    assert [x["phase"] for x in reports if x["k"] == "phase"] == ["importing torch", "setting up"], p.stdout


@pytest.mark.timeout(180)
@pytest.mark.parametrize("backend", [None, "gloo"], ids=["DDP_BACKEND-unset", "DDP_BACKEND=gloo"])
def test_wrapped_torchrun_sees_the_users_environment(tmp_path, backend):
    env = {k: v for k, v in os.environ.items() if k not in ("DDP_BACKEND", *ACTIVATION)}
    env.update(_user_env(tmp_path), PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    if backend:
        env["DDP_BACKEND"] = backend
    p = subprocess.run([sys.executable, "-m", "ddptui.tui.cli", "--runs-dir", str(tmp_path / "runs"), "--no-ui", "--",
                        "torchrun", "--standalone", "--nproc_per_node=2", str(FIXTURES / "ddp_reads_backend_env.py")],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=170)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr
    for r in (0, 1):
        assert re.search(rf"\[rank {r}\] DDP_BACKEND={backend!r} PYTHONPATH={env['PYTHONPATH']!r}$", p.stdout,
                         re.M), p.stdout[-3000:]
        assert f"[rank {r}] rank {r} trained on gloo" in p.stdout


def _xla_venv() -> Path | None:
    out = subprocess.run(["bash", str(ROOT / "scripts/xla-venv.sh"), "--print-path"], capture_output=True,
                         text=True, timeout=10).stdout.strip()
    return Path(out) if out and (Path(out) / ".ddptui-complete").is_file() else None


XLA_VENV = _xla_venv()


@pytest.mark.xla
@pytest.mark.timeout(240)
@pytest.mark.skipif(XLA_VENV is None, reason="the torch_xla venv is not built: run `make xla-venv`")
@pytest.mark.parametrize("start_method", ["spawn", "fork"])
def test_xla_launcher_passes_the_activation_to_its_worker_only(tmp_path, monkeypatch, start_method):
    dump = tmp_path / "envs"
    dump.mkdir()
    monkeypatch.setenv("XLA_START_METHOD", start_method)
    for k, v in _user_env(tmp_path).items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("PYTHONUNBUFFERED", raising=False)
    monkeypatch.setenv("ENV_DUMP_DIR", str(dump))
    path = tmp_path / "xla-helper.yaml"
    path.write_text(f"runner: xla\nworkload: {{script: {FIXTURES / 'xla_replicas_run_a_helper.py'}, venv: {XLA_VENV}}}\n"
                    "replica_check: false\nstall_after: 60\ntimeout: 200\n")
    from ddptui.runners.session import Session

    rec = Recorder()
    code = Session(load_profile(path), tmp_path / "runs", emit=rec).run()
    out = {r: "\n".join(rec.lines(r)) for r in (0, 1)}
    assert code == 0, out
    pids = set()
    for r in (0, 1):
        m = re.search(rf"replica {r} pid (\d+) sum {4.0 * (r + 1)} helper said b'42\\n'", out[r])
        assert m, out[r]
        pids.add(int(m.group(1)))
    # the worker (both thread replicas) said hello, and nothing else did
    assert sorted((h.rank, h.pid) for h in rec.of(ev.RankHello)) == [(0, *pids), (1, *pids)]
    seen = _dumps(dump)
    assert set(seen) == {"helper-launcher", "helper-replica-0", "helper-replica-1"}
    for name, d in seen.items():
        env = d["env"]
        assert not [k for k in ACTIVATION if k in env], (name, sorted(k for k in env if k.startswith("DDPTUI")))
        assert env.get("PYTHONPATH") == os.environ["PYTHONPATH"], name


WORKER_PROGRAM = """
import multiprocessing as mp, os, sys, time
def work(ready):
    open(ready, "w").close()  # the injected sitecustomize ran before this, at the worker's start
    time.sleep(120)
if __name__ == "__main__":
    os.environ.update(DDPTUI="1", DDPTUI_XLA="1", DDPTUI_PID=sys.argv[1], PYTHONPATH=sys.argv[2])
    p = mp.get_context("spawn").Process(target=work, args=(sys.argv[3],))  # as torch_xla.launch starts its worker
    p.start()
    print(p.pid, flush=True)
    p.join()
"""


@pytest.mark.timeout(60)
def test_the_xla_worker_ends_with_the_program_that_started_it(tmp_path):
    """ddptui SIGKILLed: the XLA program ends by PDEATHSIG; before, its torch_xla.launch worker trained on, orphaned."""
    import psutil
    prog, ready = tmp_path / "prog.py", tmp_path / "ready"
    prog.write_text(WORKER_PROGRAM)
    program = subprocess.Popen([sys.executable, str(prog), str(os.getpid()), str(INJECT_DIR), str(ready)],
                               stdout=subprocess.PIPE, text=True)
    try:
        worker = psutil.Process(int(program.stdout.readline()))
        wait_until(ready.exists, 30, "the worker ready",
                   stop_if=lambda: None if worker.is_running() else "the worker ended")
        program.kill()  # as the kernel's SIGTERM ends it when ddptui dies; SIGKILL runs nothing of it
        program.wait(10)
        worker.wait(10)  # the kernel's SIGTERM as its parent died
    finally:
        if program.poll() is None:
            program.kill()
            program.wait()
