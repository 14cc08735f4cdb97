"""The mirage runner's plans against the tutorial's own command lines, for every shipped profile and override."""
from __future__ import annotations

import dataclasses
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from ddptui.runners.launch import mirage
from ddptui.runners.launch.profile import model as profile_mod
from ddptui.runners.launch.profile.load import load_profile
from ddptui.runners.launch.rank_python import default_python

pytestmark = pytest.mark.any_python

ROOT = Path(__file__).resolve().parent.parent
PROFILES = ROOT / "profiles"
WORKLOADS = ROOT / "runners" / "workloads"
INJECT = ROOT / "runners" / "inject"

# Verbatim from the mirage DDP tutorial (TL;DR, step 2, multi-node, smoke test); the relative paths in them are
# swapped for ours by expected().
DOC_SINGLE = "mirage run --profile mi350x --gpus-per-node 2 -- torchrun --standalone --nproc_per_node=2 ddp_mlp.py"
DOC_CARGO = ("cargo run --quiet -- run --profile mi350x --gpus-per-node 2 -- .venv-mi350/bin/torchrun --standalone "
             "--nproc_per_node=2 tests/fixtures/ml/ddp_mlp.py")
DOC_MULTI = ("mirage run --profile mi350x --num-nodes 2 --gpus-per-node 2 --env NCCL_P2P_DISABLE=1 "
             "--env NCCL_SHM_DISABLE=1 --env NCCL_SOCKET_IFNAME=lo -- .venv-mi350/bin/python3 "
             "tests/fixtures/ml/ddp_mlp.py")
DOC_SMOKE = DOC_MULTI.replace("ddp_mlp.py", "dist_smoke.py")


def expected(doc: str, venv: Path, **swap: str) -> list[str]:
    words = shlex.split(doc)
    subs = {"torchrun": str(venv / "bin" / "torchrun"), ".venv-mi350/bin/torchrun": str(venv / "bin" / "torchrun"),
            ".venv-mi350/bin/python3": str(venv / "bin" / "python3"),
            "ddp_mlp.py": str(WORKLOADS / "ddp_mlp.py"), "tests/fixtures/ml/ddp_mlp.py": str(WORKLOADS / "ddp_mlp.py"),
            "tests/fixtures/ml/dist_smoke.py": str(WORKLOADS / "dist_smoke.py"), **swap}
    return [subs.get(w, w) for w in words]


def without_log_flags(argv: list[str]) -> list[str]:
    """The plan adds `--log-dir D -r 3` so every rank writes its own files; everything else is the document's."""
    i = argv.index("--log-dir")
    assert argv[i + 2:i + 4] == ["-r", "3"]
    return argv[:i] + argv[i + 4:]


def load(name: str, *overrides: str):
    return load_profile(PROFILES / f"{name}.yaml", list(overrides))


def make_venv(folder: Path) -> Path:
    """A venv-shaped folder (what the loader and the runner look at), its interpreter the test's own."""
    (folder / "bin").mkdir(parents=True)
    (folder / "pyvenv.cfg").write_text(f"home = {Path(sys.executable).parent}\n")
    for name in ("python", "python3"):
        os.symlink(sys.executable, folder / "bin" / name)
    torchrun = folder / "bin" / "torchrun"
    torchrun.write_text("#!/bin/sh\nexit 0\n")
    torchrun.chmod(0o755)
    return folder


THIS_VENV = Path(default_python()).parent.parent  # where a profile naming no interpreter runs its ranks from


@pytest.mark.timeout(20)
def test_single_node_ddp_is_the_documents_command(tmp_path):
    p = load("mi350x-ddp")
    pl = mirage.plan(p, tmp_path, 29500, dashboard_pid=4242)
    assert pl.runner == "mirage" and pl.world_size == 2 and len(pl.procs) == 1
    proc = pl.procs[0]
    argv = list(proc.argv)
    assert without_log_flags(argv) == expected(DOC_SINGLE, THIS_VENV)
    log_dir = tmp_path / "torchrun" / "node0"
    assert argv[argv.index("--log-dir") + 1] == str(log_dir)
    assert proc.ranks == (0, 1) and proc.stdout_rank is None
    assert proc.cwd == str(PROFILES)  # mirage.workspace defaults to the profile's folder
    by_rank = {(s.rank, s.stream): s.path for s in pl.sources}
    assert by_rank[(1, "out")] == str(log_dir / "*" / "attempt_*" / "1" / "stdout.log")
    assert set(by_rank) == {(r, s) for r in (0, 1) for s in ("out", "err")}
    env = proc.env
    assert env["PYTHONPATH"].split(os.pathsep)[0] == str(INJECT)
    assert env["DDPTUI_PID"] == "4242" and env["DDP_BACKEND"] == "gloo" and env["DDP_DEVICE"] == "cuda"
    assert env["DDP_STEPS"] == "50"
    # as `source $VENV/bin/activate` does: mirage finds rocjitsu through the venv's rocm-sdk on PATH
    assert env["VIRTUAL_ENV"] == str(THIS_VENV)
    assert env["PATH"].split(os.pathsep)[0] == str(THIS_VENV / "bin")
    assert "mirage run --profile mi350x" in pl.describe()


@pytest.mark.timeout(20)
def test_knobs_nproc_steps_profile(tmp_path):
    """NPROC=4 STEPS=100 PROFILE=mi300x of the runner script, as --set overrides."""
    p = load("mi350x-ddp", "nproc=4", "steps=100", "mirage.profile=mi300x")
    pl = mirage.plan(p, tmp_path, 1)
    argv = without_log_flags(list(pl.procs[0].argv))
    assert argv == expected(DOC_SINGLE.replace("2", "4").replace("mi350x", "mi300x"), THIS_VENV)
    assert pl.world_size == 4 and pl.procs[0].ranks == (0, 1, 2, 3)
    assert pl.procs[0].env["DDP_STEPS"] == "100"
    assert {s.rank for s in pl.sources} == {0, 1, 2, 3}


@pytest.mark.timeout(20)
def test_knob_venv(tmp_path):
    venv = make_venv(tmp_path / ".venv-mi350")
    p = load("mi350x-ddp", f"workload.venv={venv}")
    pl = mirage.plan(p, tmp_path / "run", 1)
    assert without_log_flags(list(pl.procs[0].argv)) == expected(DOC_SINGLE, venv)
    assert pl.procs[0].env["VIRTUAL_ENV"] == str(venv)
    multi = mirage.plan(load("mi350x-multinode", f"workload.venv={venv}"), tmp_path / "run2", 1)
    assert list(multi.procs[0].argv) == expected(DOC_MULTI, venv)


@pytest.mark.timeout(20)
def test_cargo_form_runs_from_the_workspace(tmp_path):
    ws = tmp_path / "emulation" / "mirage"
    ws.mkdir(parents=True)
    venv = make_venv(ws / ".venv-mi350")
    prof = tmp_path / "cargo.yaml"
    prof.write_text((PROFILES / "mi350x-ddp.yaml").read_text() + f"  command: [cargo, run, --quiet, --]\n"
                    f"  workspace: {ws}\n")
    p = load_profile(prof, [f"workload.venv={venv}"])
    pl = mirage.plan(p, tmp_path / "run", 1)
    assert without_log_flags(list(pl.procs[0].argv)) == expected(DOC_CARGO, venv)
    assert pl.procs[0].cwd == str(ws)


@pytest.mark.timeout(20)
@pytest.mark.parametrize("name,doc", [("mi350x-multinode", DOC_MULTI), ("mi350x-smoke", DOC_SMOKE)])
def test_multinode_without_launcher_is_the_documents_command(tmp_path, name, doc):
    p = load(name)
    pl = mirage.plan(p, tmp_path, 1)
    proc = pl.procs[0]
    assert list(proc.argv) == expected(doc, THIS_VENV)
    assert pl.world_size == 2 and proc.ranks == (0, 1)
    assert pl.sources == ()  # mirage's own stdout carries both nodes, each line labelled `[RANK] `
    assert proc.stdout_rank is None
    assert "NCCL_SOCKET_IFNAME" not in proc.env  # they travel as --env, as in the document


@pytest.mark.timeout(20)
def test_one_process_without_launcher_is_attributed_to_rank_0(tmp_path):
    pl = mirage.plan(load("mi350x-smoke", "nnodes=1"), tmp_path, 1)
    argv = list(pl.procs[0].argv)
    assert "--num-nodes" not in argv and pl.world_size == 1
    assert pl.procs[0].stdout_rank == 0  # a single process gets mirage's stdout unlabelled


@pytest.mark.timeout(20)
def test_several_ranks_per_node_without_launcher_use_nproc_per_node(tmp_path):
    pl = mirage.plan(load("mi350x-smoke", "nproc=2"), tmp_path, 1)
    argv = list(pl.procs[0].argv)
    assert argv[argv.index("--nproc-per-node") + 1] == "2"
    assert pl.world_size == 4 and pl.procs[0].ranks == (0, 1, 2, 3)


@pytest.mark.timeout(20)
def test_in_process_flag(tmp_path):
    argv = list(mirage.plan(load("mi350x-ddp", "mirage.in_process=true"), tmp_path, 1).procs[0].argv)
    assert argv[argv.index("--") - 1] == "--in-process"
    argv = list(mirage.plan(load("mi350x-ddp"), tmp_path, 1).procs[0].argv)
    assert "--in-process" not in argv


@pytest.mark.timeout(20)
def test_multinode_torchrun_expands_mirages_variables_per_node(tmp_path):
    """mirage execs without a shell, so the plan's /bin/sh must turn $RANK and $MASTER_ADDR:$MASTER_PORT into
    each node's own torchrun flags."""
    p = load("mi350x-ddp", "nnodes=2", "nproc=1", "mirage.gpus_per_node=2")
    pl = mirage.plan(p, tmp_path, 1)
    argv = list(pl.procs[0].argv)
    head = argv[:argv.index("--") + 1]
    assert head == ["mirage", "run", "--profile", "mi350x", "--num-nodes", "2", "--gpus-per-node", "2", "--"]
    sh, dash_c, script = argv[len(head):]
    assert (sh, dash_c) == ("/bin/sh", "-c")
    printed = script.replace("exec ", "printf '%s\\n' ", 1)
    for node in (0, 1):
        env = {**os.environ, "RANK": str(node), "MASTER_ADDR": "10.1.2.3", "MASTER_PORT": "29411"}
        out = subprocess.run(["/bin/sh", "-c", printed], env=env, capture_output=True, text=True, timeout=10)
        assert out.stdout.splitlines() == [
            str(THIS_VENV / "bin" / "torchrun"), "--nnodes", "2", "--node-rank", str(node),
            "--rdzv-endpoint", "10.1.2.3:29411", "--nproc_per_node=1",
            "--log-dir", str(tmp_path / "torchrun" / f"node{node}"), "-r", "3", str(WORKLOADS / "ddp_mlp.py")]
    ranks = {(s.rank, s.path) for s in pl.sources if s.stream == "out"}
    assert ranks == {(n, str(tmp_path / "torchrun" / f"node{n}" / "*" / "attempt_*" / "0" / "stdout.log"))
                     for n in (0, 1)}
    assert pl.world_size == 2


@pytest.mark.timeout(20)
def test_workload_args_and_modules_reach_the_inner_command(tmp_path):
    pl = mirage.plan(load("mi350x-multinode", "workload.module=pkg.train"), tmp_path, 1)
    assert list(pl.procs[0].argv)[-3:] == [str(THIS_VENV / "bin" / "python3"), "-m", "pkg.train"]
    pl = mirage.plan(load("mi350x-ddp", "workload.module=pkg.train"), tmp_path, 1)
    assert list(pl.procs[0].argv)[-2:] == ["-m", "pkg.train"]


@pytest.mark.timeout(20)
def test_options_defaults_follow_the_profile():
    o = load("mi350x-ddp", "nproc=3").mirage
    assert o.gpus_per_node == 3 and o.num_nodes == 1 and o.command == ("mirage",) and o.inner == "torchrun"
    assert o.require_rocm is True  # until the profile says otherwise, the venv must carry the ROCm SDK
    assert o.workspace == str(PROFILES) and not o.via_cargo
    o = load("mi350x-multinode").mirage
    assert o.env == {"NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1", "NCCL_SOCKET_IFNAME": "lo"}
    assert o.num_nodes == 2 and o.gpus_per_node == 2 and o.inner == "env"


@pytest.mark.timeout(20)
def test_the_runner_takes_the_typed_profiles_mirage_options(tmp_path):
    """One home: the plan is built from Profile.mirage as given, with no defaults or re-reading of its own."""
    assert mirage.MirageOptions is profile_mod.MirageOptions
    p = load("mi350x-ddp")
    ws = tmp_path / "ws"
    ws.mkdir()
    opts = dataclasses.replace(p.mirage, command=("cargo", "run", "--"), profile="mi300x", gpus_per_node=4,
                               env={"A": "1"}, workspace=str(ws))
    assert opts.via_cargo
    proc = mirage.plan(dataclasses.replace(p, mirage=opts), tmp_path / "run", 1).procs[0]
    head = list(proc.argv)[:list(proc.argv).index("--", 3) + 1]
    assert head == ["cargo", "run", "--", "run", "--profile", "mi300x", "--gpus-per-node", "4", "--env", "A=1", "--"]
    assert proc.cwd == str(ws)
