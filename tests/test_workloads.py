"""The built-in workloads under a real torchrun with the injected code: ok runs, every fault, exit codes."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from ddptui.runners.evidence import hang_verdict

from ddptui.runners.edge import stacks
from tests.support.engine import loss_steps, reported_steps, strict_reports as reports
from tests.support.wait import exited, wait_until

pytestmark = pytest.mark.main_suite("the built-in workloads, run on the test's own interpreter")

REPO = Path(__file__).resolve().parents[1]
INJECT = REPO / "runners" / "inject"
WORKLOADS = REPO / "runners" / "workloads"
sys.path.insert(0, str(WORKLOADS))
import _faults  # noqa: E402

_SCRUB = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "DDP_FAULT",
          "DDP_STEPS", "DDP_DEVICE", "DDP_BACKEND", "DDP_SEED", "DDPTUI", "DDPTUI_PID", "DDPTUI_XLA", "PYTHONPATH")


def rank_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _SCRUB}
    env.update(PYTHONPATH=str(INJECT), DDPTUI="1", PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
    env.update(extra)
    return env


class Torchrun:
    """One `python -m torch.distributed.run --standalone --nproc_per_node 2` with per-rank log files."""

    def __init__(self, tmp: Path, script: Path, env: dict[str, str]):
        self.logs = tmp / "logs"
        self.launcher_out = open(tmp / "launcher.out", "wb")
        self.launcher_err = open(tmp / "launcher.err", "wb")
        argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                "--log-dir", str(self.logs), "-r", "3", str(script)]
        self.proc = subprocess.Popen(argv, env=env, cwd=tmp, stdout=self.launcher_out, stderr=self.launcher_err,
                                     start_new_session=True)
        self.tmp = tmp

    def wait(self, timeout: float = 120) -> int:
        return self.proc.wait(timeout)

    def _file(self, local: int, name: str) -> str:
        found = list(self.logs.glob(f"*/attempt_0/{local}/{name}.log"))
        return found[0].read_text(errors="replace") if found else ""

    def out(self, local: int) -> str:
        return self._file(local, "stdout")

    def err(self, local: int) -> str:
        return self._file(local, "stderr")

    def launcher(self) -> str:
        self.launcher_err.flush()
        return (self.tmp / "launcher.err").read_text(errors="replace")

    def wait_for(self, local: int, needle: str, timeout: float) -> bool:
        return wait_until(lambda: needle in self.out(local), timeout, f"local rank {local} to print {needle!r}",
                          step=0.2, stop_if=exited(self.proc),
                          seen=lambda: self.out(local) + self.err(local) + self.launcher())

    def kill(self) -> None:
        # torchrun puts every rank in its own session: a group kill of the launcher does not reach them.
        try:
            kids = psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            kids = []
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        for k in kids:
            try:
                k.kill()
            except psutil.NoSuchProcess:
                pass
        self.proc.wait(10)
        _, alive = psutil.wait_procs(kids, timeout=10)
        self.launcher_out.close()
        self.launcher_err.close()
        assert not alive, f"left behind: {alive}"


@pytest.fixture
def launch(tmp_path):
    runs: list[Torchrun] = []

    def start(workload: str, **env: str) -> Torchrun:
        run = Torchrun(tmp_path, WORKLOADS / f"{workload}.py", rank_env(**env))
        runs.append(run)
        return run

    yield start
    for run in runs:
        run.kill()


@pytest.mark.timeout(150)
def test_ddp_mlp_ok_with_reports(launch):
    run = launch("ddp_mlp", DDP_STEPS="6")
    assert run.wait() == 0, run.launcher() + run.err(0) + run.err(1)
    out0 = run.out(0)
    assert re.search(r"^\[rank 0\] loss: \d+\.\d{4} -> \d+\.\d{4} over 6 steps$", out0, re.M), out0
    assert "[rank 0] all ranks converged with identical replicas" in out0
    assert "ddp_mlp_ok" in out0.splitlines()
    assert re.search(r"^\[rank 1\] step 6 loss \d+\.\d{4}$", run.out(1), re.M)
    digests = {}
    for r in (0, 1):
        reps = reports(run.out(r))
        assert all(rep["r"] == r for rep in reps)
        hello = [x for x in reps if x["k"] == "hello"]
        assert len(hello) == 1 and hello[0]["world"] == 2 and hello[0]["local"] == r
        assert max(reported_steps(reps)) == 6
        assert loss_steps(reps) == [1, 2, 3, 4, 5, 6]
        dig = [x for x in reps if x["k"] == "digest"]
        assert [d["source"] for d in dig] == ["explicit"]  # no second automatic "ddp" digest at exit
        digests[r] = dig[0]["params"]
        assert [x["ok"] for x in reps if x["k"] == "verdict"] == [True]
    assert digests[0] == digests[1]
    assert [p[0] for p in digests[0]] == ["0.weight", "0.bias", "2.weight", "2.bias", "4.weight", "4.bias"]
    assert digests[0][0][2:] == [[64, 16], "torch.float32"]


@pytest.mark.timeout(150)
def test_dist_smoke_ok(launch):
    run = launch("dist_smoke", DDP_STEPS="3")
    assert run.wait() == 0, run.launcher() + run.err(0) + run.err(1)
    for r in (0, 1):
        lines = [x for x in run.out(r).splitlines() if not x.startswith("@ddptui") and x != "dist_smoke_ok"]
        assert lines and all(re.match(rf"^\[\d\d:\d\d:\d\d\.\d{{3}}\] \[rank {r}\] ", x) for x in lines), lines
        assert f"[rank {r}] current device = cpu" in run.out(r)
        assert sum(f"[rank {r}] step " in x for x in lines) == 3
        assert f"[rank {r}] post all_reduce: tensor = 3.0" in run.out(r)
    assert "dist_smoke_ok" in run.out(0).splitlines()
    assert "dist_smoke_ok" not in run.out(1)


@pytest.mark.timeout(150)
def test_hang_blocks_the_other_rank(launch):
    run = launch("ddp_mlp", DDP_STEPS="20", DDP_FAULT="hang:1:2")
    assert run.wait_for(1, "[rank 1] injecting hang at step 2", 100), run.out(1) + run.err(1) + run.launcher()
    pids = {x["r"]: x["pid"] for r in (0, 1) for x in reports(run.out(r)) if x["k"] == "hello"}
    # rank 0 runs step 3 up to the all-reduce its peer never joins: wait until its stack says it waits there
    rank0 = [stacks.Target(0, pids[0], None)]
    wait_until(lambda: hang_verdict.classify(stacks.collect(rank0, method="py-spy", workers=False)[0].threads)
               .category == "collective", 60, "rank 0 to block in the all-reduce", stop_if=exited(run.proc))
    # both ranks are quiet now; their report threads write what was pending (steps 1-2)
    wait_until(lambda: all(2 in loss_steps(reports(run.out(r))) for r in (0, 1)), 30, "steps 1-2 reported by both",
               step=0.05, seen=lambda: run.out(0) + run.out(1))
    before = run.out(0)
    assert run.proc.poll() is None
    for r in (0, 1):
        p = psutil.Process(pids[r])
        assert p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    # still blocked in the all-reduce of step 3 after its output was read, having said nothing since
    assert hang_verdict.classify(stacks.collect(rank0, method="py-spy", workers=False)[0].threads).category == "collective"
    assert run.out(0) == before
    assert loss_steps(reports(before))[-1] == 2 and loss_steps(reports(run.out(1)))[-1] == 2
    assert "step 3 loss" not in before


@pytest.mark.timeout(150)
def test_crash_reports_the_exception(launch):
    run = launch("ddp_mlp", DDP_STEPS="20", DDP_FAULT="crash:1:1")
    assert run.wait() != 0
    assert "RuntimeError: injected crash on rank 1 at step 1" in run.err(1)
    exc = [x for x in reports(run.out(1)) if x["k"] == "exc"]
    assert len(exc) == 1, run.out(1)
    assert exc[0]["type"] == "RuntimeError" and exc[0]["msg"] == "injected crash on rank 1 at step 1"
    assert re.search(r"_faults\.py:\d+$", exc[0]["where"])
    assert 0 < len(exc[0]["tb"]) <= 15 and "injected crash" in exc[0]["tb"][-1]
    assert re.search(r"exitcode\s*:\s*1 ", run.launcher())


@pytest.mark.timeout(150)
def test_diverge_exits_3_and_digests_differ_in_first_param(launch):
    run = launch("ddp_mlp", DDP_STEPS="4", DDP_FAULT="diverge:1:0")
    assert run.wait() != 0
    assert re.search(r"exitcode\s*:\s*3 ", run.launcher()), run.launcher()
    assert "replicas differ" in run.err(0)
    assert "ddp_mlp_ok" not in run.out(0)
    d0, d1 = ([x for x in reports(run.out(r)) if x["k"] == "digest"][0]["params"] for r in (0, 1))
    assert [p[0] for p in d0] == [p[0] for p in d1]
    assert [a[0] for a, b in zip(d0, d1) if a[1] != b[1]] == ["0.weight"]
    assert [x["ok"] for x in reports(run.out(0)) if x["k"] == "verdict"] == [False]


@pytest.mark.timeout(150)
def test_slow_rank_sleeps_every_step(launch):
    run = launch("dist_smoke", DDP_STEPS="4", DDP_FAULT="slow:1:1:0.3")
    assert run.wait() == 0, run.launcher() + run.err(1)
    out1 = run.out(1)
    assert "[rank 1] injecting slowness (0.3 s per step) from step 1" in out1
    assert "injecting" not in run.out(0)

    def stamp(line):
        h, m, s = re.match(r"\[(\d\d):(\d\d):([\d.]+)\]", line).groups()
        return int(h) * 3600 + int(m) * 60 + float(s)
    steps = [stamp(x) for x in out1.splitlines() if "] step " in x]
    assert len(steps) == 4
    assert (steps[-1] - steps[0]) % 86400 >= 0.85  # three slowed steps of 0.3 s


def run_single(workload: str, **env: str) -> subprocess.CompletedProcess:
    base = dict(RANK="0", WORLD_SIZE="2", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT="29999")
    base.update(env)
    return subprocess.run([sys.executable, str(WORKLOADS / f"{workload}.py")], env=rank_env(**base),
                          capture_output=True, text=True, timeout=90, start_new_session=True)


@pytest.mark.timeout(100)
@pytest.mark.parametrize("workload", ["ddp_mlp", "dist_smoke"])
def test_cuda_requested_without_cuda_exits_4(workload):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    p = run_single(workload, DDP_DEVICE="cuda")
    assert p.returncode == 4, p.stderr
    assert "[rank 0] CUDA requested (DDP_DEVICE=cuda) but torch.cuda.is_available() is False" in p.stderr


@pytest.mark.timeout(100)
@pytest.mark.parametrize("workload", ["ddp_mlp", "dist_smoke"])
def test_malformed_fault_exits_4(workload):
    p = run_single(workload, DDP_FAULT="explode:1:2")
    assert p.returncode == 4
    lines = [x for x in p.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and "bad DDP_FAULT='explode:1:2'" in lines[0], p.stderr


@pytest.mark.timeout(100)
@pytest.mark.parametrize("workload", ["ddp_mlp", "dist_smoke"])
@pytest.mark.parametrize("missing", ["RANK", "MASTER_PORT"])
def test_missing_env_exits_4(workload, missing):
    """Both built-ins read the launcher's variables through _rankio.launch_env: one line, exit 4."""
    p = run_single(workload, **{missing: ""})
    lines = [x for x in p.stderr.splitlines() if x.strip()]
    assert p.returncode == 4 and len(lines) == 1 and f"{missing} is not set" in lines[0], p.stderr


@pytest.mark.timeout(10)
def test_fault_parsing():
    assert _faults.parse("hang:1:2") == _faults.DdpFault("hang", 1, 2, 3600.0)
    assert _faults.parse("hang:1:2:") == _faults.DdpFault("hang", 1, 2, 3600.0)
    assert _faults.parse("slow:0:3") == _faults.DdpFault("slow", 0, 3, 0.2)
    assert _faults.parse("slow:0:3:1.5") == _faults.DdpFault("slow", 0, 3, 1.5)
    assert _faults.parse("crash:1:0").kind == "crash"
    assert _faults.parse("diverge:0:0").seconds == 0.0  # a kind that takes no seconds
    for bad in ("hang", "hang:1", "boom:1:2", "hang:x:2", "hang:1:-1", "hang:1:2:3:4", "slow:1:2:-1", "slow:1:2:nan"):
        with pytest.raises(ValueError):
            _faults.parse(bad)


@pytest.mark.timeout(10)
def test_injector_only_acts_on_its_rank():
    said = []
    inj = _faults.Injector(_faults.parse("crash:1:2"), 0, said.append)
    for s in range(5):
        inj.at_step(s)
    inj = _faults.Injector(_faults.parse("crash:1:2"), 1, said.append)
    inj.at_step(0)
    inj.at_step(1)
    with pytest.raises(RuntimeError, match="injected crash on rank 1 at step 2"):
        inj.at_step(2)
    assert said == []
