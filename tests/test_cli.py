"""The `ddptui` command line for real: headless output format, exit codes, ad-hoc commands, signals, dry runs."""
from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

ROOT = Path(__file__).resolve().parent.parent
LINE = re.compile(r"^\[\d\d:\d\d:\d\d\.\d{3}\] \[(rank \d+|launcher|ddptui|hint|stall|crash)\] ")
PLAIN_DDP = textwrap.dedent("""
    import os, torch, torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    dist.init_process_group("gloo")
    r = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(torch.nn.Linear(8, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    torch.manual_seed(r + 1)
    for step in range(15):
        x = torch.randn(16, 8)
        loss = model(x).pow(2).mean()
        opt.zero_grad(); loss.backward(); opt.step()
        print(f"step {step} loss {loss.item():.4f}")
    dist.barrier()
    dist.destroy_process_group()
""")


def ddptui(*args, runs_dir, timeout=120, **kw):
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    env.pop("NO_COLOR", None)
    return subprocess.run([sys.executable, "-m", "tui.cli", "--runs-dir", str(runs_dir), *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout, env=env, **kw)


@contextlib.contextmanager
def live_ddptui(runs_dir: Path, *args: str):
    """A headless ddptui running in the background; killed on the way out if the test left it running."""
    proc = subprocess.Popen([sys.executable, "-m", "tui.cli", "--runs-dir", str(runs_dir), *args], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def wait_for_rank1(runs_dir: Path, text: str, timeout: float = 60) -> float:
    """Wait until the live run's rank 1 log shows `text`; returns the deadline for further waiting."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        runs = list(runs_dir.iterdir())
        if runs and (runs[0] / "rank1.log").exists() and text in (runs[0] / "rank1.log").read_text():
            break
        time.sleep(0.2)
    return deadline


def only_run(runs_dir: Path) -> Path:
    (d,) = list(runs_dir.iterdir())
    return d


@pytest.mark.timeout(120)
def test_headless_output_summary_and_exit_code(runs_dir, tmp_path):
    out = tmp_path / "summary.json"
    p = ddptui("profiles/cpu-smoke.yaml", "--no-ui", "--summary", str(out), runs_dir=runs_dir)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    body = lines[: lines.index(next(x for x in lines if x.startswith("== ddptui:")))]
    assert all(LINE.match(x) or x.startswith("    ") or not x for x in body), [x for x in body if not LINE.match(x)][:3]
    assert any(re.search(r"\[rank 0\] dist_smoke_ok$", x) for x in lines)
    assert "\x1b[" not in p.stdout  # no colour when not a terminal
    assert "status: ok (exit 0)" in p.stdout
    summary = json.loads(out.read_text())
    assert summary == json.loads((only_run(runs_dir) / "summary.json").read_text())
    assert summary["exit_code"] == 0 and set(summary["ranks"]) == {"0", "1"}


@pytest.mark.timeout(60)
def test_dry_run_prints_every_process(runs_dir):
    p = ddptui("profiles/multinode-env.yaml", "--dry-run", "--set", "nnodes=3", runs_dir=runs_dir)
    assert p.returncode == 0, p.stderr
    assert p.stdout.count("argv: ") == 3 and "env:  RANK=2" in p.stdout and "cwd:  " in p.stdout
    assert "env:  WORLD_SIZE=3" in p.stdout and "MASTER_PORT=" in p.stdout
    assert not list(runs_dir.iterdir()), "a dry run starts nothing and records nothing"


@pytest.mark.timeout(60)
@pytest.mark.parametrize("yaml_text, expect", [
    ("workload: {builtin: ddp_mlp}\nnprocs: 2\n", r":2:1: unknown field 'nprocs' \(did you mean 'nproc'\?\)"),
    ("workload: {builtin: ddp_mlp}\nnproc: 0\n", r":2:8: field 'nproc': expected an integer >= 1, got 0"),
    ("workload: {script: missing.py}\n", r"field 'workload.script'"),
    ("workload: {builtin: ddp_mlp}\nnproc: [\n", r"bad\.yaml:\d+:\d+: "),
])
def test_bad_profile_is_one_line_exit_2(runs_dir, tmp_path, yaml_text, expect):
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml_text)
    p = ddptui(str(bad), "--no-ui", runs_dir=runs_dir)
    assert p.returncode == 2
    err = p.stderr.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert re.search(expect, err), err
    assert err.startswith(str(bad))


@pytest.mark.timeout(60)
def test_bad_override_is_one_line_exit_2(runs_dir):
    p = ddptui("profiles/cpu-ddp.yaml", "--no-ui", "--set", "stall_after=soon", runs_dir=runs_dir)
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1 and "--set stall_after=soon" in p.stderr


@pytest.mark.timeout(120)
def test_wraps_an_unmodified_torchrun_command(runs_dir, tmp_path):
    script = tmp_path / "plain_ddp.py"
    script.write_text(PLAIN_DDP)
    p = ddptui("--no-ui", "--", "torchrun", "--standalone", "--nproc_per_node=2", str(script), runs_dir=runs_dir)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr
    assert re.search(r"\[rank 1\] step 14 loss", p.stdout)
    summary = json.loads((only_run(runs_dir) / "summary.json").read_text())
    assert summary["ranks"]["0"]["steps"] == 15 and summary["ranks"]["1"]["steps"] == 15
    assert summary["replica"]["status"] == "identical"  # digests from the injected code, script unaware


@pytest.mark.timeout(120)
def test_wraps_an_env_rank_program_per_emulated_node(runs_dir, tmp_path):
    script = tmp_path / "plain_ddp.py"
    script.write_text(PLAIN_DDP)
    p = ddptui("--no-ui", "--set", "nnodes=2", "--", sys.executable, str(script), runs_dir=runs_dir)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr
    assert re.search(r"\[rank 0\] step 14 loss", p.stdout) and re.search(r"\[rank 1\] step 14 loss", p.stdout)
    assert "replicas: all 2 ranks hold byte-identical weights" in p.stdout


@pytest.mark.timeout(120)
def test_sigint_stops_every_rank_and_keeps_the_logs(runs_dir):
    with live_ddptui(runs_dir, "profiles/cpu-ddp.yaml", "--no-ui", "--set", "steps=100000") as proc:
        wait_for_rank1(runs_dir, "step")
        ranks = [c for c in psutil.Process(proc.pid).children(recursive=True)]
        assert len(ranks) >= 3  # torchrun + 2 ranks
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 1
    assert "status: stopped (exit 1)" in out
    assert not [p for p in ranks if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    log = (only_run(runs_dir) / "rank1.log").read_text()
    assert "step" in log


@pytest.mark.timeout(120)
def test_sigkill_of_torchrun_does_not_orphan_ranks(runs_dir):
    with live_ddptui(runs_dir, "profiles/cpu-ddp.yaml", "--no-ui", "--set", "steps=100000") as proc:
        deadline = time.monotonic() + 60
        ranks = []
        while time.monotonic() < deadline and len(ranks) < 2:
            kids = psutil.Process(proc.pid).children(recursive=True)
            launcher = [k for k in kids if "torch.distributed.run" in " ".join(k.cmdline())]
            ranks = [k for k in kids if "ddp_mlp.py" in " ".join(k.cmdline()) and k not in launcher]
            time.sleep(0.2)
        assert launcher and len(ranks) == 2
        time.sleep(2)
        launcher[0].kill()
        out, _ = proc.communicate(timeout=40)
    assert proc.returncode == 1, out[-1500:]
    assert not [p for p in ranks if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


@pytest.mark.timeout(30)
def test_help_and_usage_errors(runs_dir):
    p = ddptui("--help", runs_dir=runs_dir)
    assert p.returncode == 0 and "exit codes: 0 ok, 1 run failed" in p.stdout
    p = ddptui("--no-ui", runs_dir=runs_dir)
    assert p.returncode == 2 and "needs a PROFILE" in p.stderr
    p = ddptui("no-such-profile", "--no-ui", runs_dir=runs_dir)
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1


@pytest.mark.timeout(120)
def test_dump_command_collects_stacks_of_a_live_run(runs_dir):
    with live_ddptui(runs_dir, "profiles/hang.yaml", "--no-ui", "--set", "on_stall=wait",
                     "--set", "stall_after=300") as proc:
        deadline = wait_for_rank1(runs_dir, "injecting hang")
        run = only_run(runs_dir)
        p = ddptui("dump", str(run), runs_dir=runs_dir)
        assert p.returncode == 0, p.stderr
        while time.monotonic() < deadline and not list(run.glob("stacks/*/verdict.txt")):
            time.sleep(0.2)
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=30)
    (verdict,) = run.glob("stacks/*-on-request/verdict.txt")
    assert "rank 1 is stuck in time.sleep" in verdict.read_text()
    assert proc.returncode == 1 and ddptui("dump", str(run), runs_dir=runs_dir).returncode == 2
