"""The xla runner's plan for the shipped XLA profiles, the venv script's path logic, and the replica line tagger (no torch_xla needed)."""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ddptui.runners.launch import xla
from ddptui.runners.launch.profile.workload import WORKLOADS_DIR
from ddptui.runners.launch.profile.load import load_profile
from ddptui.runners.launch.rankenv import INJECT_DIR

pytestmark = pytest.mark.any_python

ROOT = Path(__file__).resolve().parent.parent
PROFILES = ROOT / "profiles"
SCRIPT = ROOT / "scripts" / "xla-venv.sh"


@pytest.fixture
def fake_home(tmp_path, monkeypatch):
    """A HOME whose ~/.cache/ddptui/xla-venv has an executable bin/python, so the profiles load without the real venv."""
    home = tmp_path / "home"
    py = home / ".cache" / "ddptui" / "xla-venv" / "bin" / "python"
    py.parent.mkdir(parents=True)
    py.write_text("#!/bin/sh\nexit 0\n")
    py.chmod(0o755)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    return home


def _plan(name, run_dir, *overrides):
    return xla.plan(load_profile(PROFILES / f"{name}.yaml", list(overrides)), run_dir, 0, 4242)


@pytest.mark.timeout(20)
def test_cpu_profile_is_one_process_with_thread_replicas(fake_home, tmp_path):
    run_dir = tmp_path / "run"
    plan = _plan("xla-cpu", run_dir)
    assert plan.runner == "xla" and plan.world_size == 2 and len(plan.procs) == 1
    p = plan.procs[0]
    assert p.argv == (str(fake_home / ".cache/ddptui/xla-venv/bin/python"), "-u", str(WORKLOADS_DIR / "xla_pattern1.py"))
    assert p.ranks == (0, 1) and p.stdout_rank is None
    assert Path(p.stdout).parent == run_dir / "raw" and Path(p.stderr).parent == run_dir / "raw"
    e = p.env
    assert e["PJRT_DEVICE"] == "CPU" and e["CPU_NUM_DEVICES"] == "2" and e["PJRT_CPU_ASYNC_CLIENT"] == "0"
    assert e["DDPTUI_XLA"] == "1" and e["DDPTUI_XLA_TURNSTILE"] == "1" and e["DDPTUI"] == "1"
    assert e["DDPTUI_XLA_CACHE"] == str(run_dir / "xla-cache")
    assert e["DDPTUI_PID"] == "4242" and e["DDP_STEPS"] == "20" and e["PYTHONUNBUFFERED"] == "1"
    assert e["PYTHONPATH"].split(os.pathsep)[0] == str(INJECT_DIR)
    assert "XLA_THREAD_POOL_SIZE" not in e  # 2 devices on 2 cores
    assert any("threads" in n and "ONE worker process" in n for n in plan.notes)
    assert "PJRT_CPU_ASYNC_CLIENT=0" in plan.describe()


@pytest.mark.timeout(20)
@pytest.mark.parametrize("name,script", [("xla-ddp-backend", "xla_pattern2.py"), ("xla-loader", "xla_pattern3.py")])
def test_other_cpu_patterns(fake_home, tmp_path, name, script):
    p = _plan(name, tmp_path).procs[0]
    assert p.argv[-1] == str(WORKLOADS_DIR / script) and (WORKLOADS_DIR / script).is_file()
    assert p.env["CPU_NUM_DEVICES"] == "2" and p.ranks == (0, 1)


@pytest.mark.timeout(20)
def test_tpu_profile_has_no_cpu_variables(fake_home, tmp_path):
    plan = _plan("xla-tpu", tmp_path)
    p = plan.procs[0]
    assert p.env["PJRT_DEVICE"] == "TPU" and p.ranks == (0, 1, 2, 3) and plan.world_size == 4
    for var in ("CPU_NUM_DEVICES", "PJRT_CPU_ASYNC_CLIENT", "DDPTUI_XLA_TURNSTILE", "XLA_THREAD_POOL_SIZE"):
        assert var not in p.env
    assert p.env["DDPTUI_XLA_CACHE"] == "/tmp/ddptui-xla-cache"
    assert any("one process per chip" in n for n in plan.notes)


@pytest.mark.timeout(20)
def test_more_devices_than_cores_get_a_bigger_thread_pool(fake_home, tmp_path):
    plan = _plan("xla-cpu", tmp_path, "xla.num_devices=4")
    p = plan.procs[0]
    assert p.env["CPU_NUM_DEVICES"] == "4" and p.ranks == (0, 1, 2, 3) and plan.world_size == 4
    assert p.env["XLA_THREAD_POOL_SIZE"] == "8"
    assert any("XLA_THREAD_POOL_SIZE=8" in n for n in plan.notes)
    p = _plan("xla-cpu", tmp_path, "xla.num_devices=4", "xla.thread_pool_size=3").procs[0]
    assert p.env["XLA_THREAD_POOL_SIZE"] == "3"


@pytest.mark.timeout(20)
def test_overrides_async_client_cache_and_env(fake_home, tmp_path):
    plan = _plan("xla-cpu", tmp_path, "xla.async_client=true", "xla.cache_dir=/tmp/c", "env.PJRT_DEVICE=CPU_X",
                 "fault.kind=hang", "fault.rank=1", "fault.step=3", "fault.seconds=9", "steps=7")
    e = plan.procs[0].env
    assert "PJRT_CPU_ASYNC_CLIENT" not in e and any("async_client" in n for n in plan.notes)
    assert e["DDPTUI_XLA_CACHE"] == "/tmp/c"
    assert e["PJRT_DEVICE"] == "CPU_X"  # the profile's env wins over the runner's
    assert e["DDP_FAULT"] == "hang:1:3:9" and e["DDP_STEPS"] == "7"


@pytest.mark.timeout(20)
def test_notes_warn_about_shared_cache_and_late_stall_threshold(fake_home, tmp_path):
    notes = _plan("xla-cpu", tmp_path, "env.XLA_PERSISTENT_CACHE_PATH=/tmp/shared", "stall_after=auto").notes
    assert any(n.startswith("warning:") and "XLA_PERSISTENT_CACHE_PATH" in n for n in notes)
    assert any("stall_after is auto" in n for n in notes)
    assert not any("stall_after" in n for n in _plan("xla-cpu", tmp_path).notes)  # the shipped 8 s is fine
    assert not any(n.startswith("warning:") for n in _plan("xla-cpu", tmp_path).notes)


# ---------------------------------------------------------------- scripts/xla-venv.sh

def _sh(*args, root):
    env = {**os.environ, "DDPTUI_XLA_VENV_ROOT": str(root)}
    return subprocess.run(["bash", str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=30)


@pytest.mark.timeout(40)
def test_venv_path_hashes_the_lock_and_a_stamped_build_is_reused(tmp_path):
    want = tmp_path / ("xla-" + hashlib.sha256((ROOT / "scripts/xla-requirements.txt").read_bytes()).hexdigest()[:12])
    r = _sh("--print-path", root=tmp_path)
    assert r.returncode == 0 and r.stdout.strip() == str(want)
    assert not (tmp_path / "xla-venv").exists()  # --print-path only prints
    (want / "bin").mkdir(parents=True)
    (want / ".ddptui-complete").write_text("x\n")
    r = _sh(root=tmp_path)  # stamped: reused, no build (a build would take minutes and print "building")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str(want) and "building" not in r.stderr
    assert os.readlink(tmp_path / "xla-venv") == want.name
    assert _sh("--bogus", root=tmp_path).returncode == 2


@pytest.mark.timeout(20)
def test_lock_pins_the_versions_torch_xla_needs():
    pins = dict(ln.split("==") for ln in (ROOT / "scripts/xla-requirements.txt").read_text().splitlines()
                if "==" in ln and not ln.startswith("#"))
    assert pins["torch"] == "2.9.0" and pins["torch_xla"] == "2.9.0" and "numpy" in pins


# ---------------------------------------------------------------- the replica line tagger

_TAGGER = textwrap.dedent("""
    import sys, threading
    import ddptui_xla
    def replica(n):
        ddptui_xla.bind(n)
        assert threading.current_thread().name == f"xla-rank-{n}"
        for i in range(300):
            sys.stdout.write(f"r{n} line {i} ")   # a line in three writes
            sys.stdout.write("part2 ")
            print(f"end{i}")
        print(f"two\\nlines {n}", file=sys.stderr)
        sys.stdout.write(f"partial {n}")         # no newline: flushed when the replica ends
        ddptui_xla.unbind()
    ts = [threading.Thread(target=replica, args=(n,)) for n in range(3)]
    for t in ts: t.start()
    for t in ts: t.join()
    print("main untagged")
""")


@pytest.mark.timeout(30)
def test_tagger_writes_whole_lines_tagged_with_the_thread_ordinal(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(INJECT_DIR), "DDPTUI_XLA": "1", "DDPTUI": "1", "PYTHONUNBUFFERED": "1"}
    env.pop("RANK", None)
    r = subprocess.run([sys.executable, "-c", _TAGGER], env=env, capture_output=True, text=True, timeout=25)
    assert r.returncode == 0, r.stderr
    out = r.stdout.splitlines()
    for n in range(3):
        mine = [ln for ln in out if ln.startswith(f"@ddptui:{n} r")]
        assert mine == [f"@ddptui:{n} r{n} line {i} part2 end{i}" for i in range(300)]
        assert f"@ddptui:{n} partial {n}" in out
        assert f"@ddptui:{n} two" in r.stderr.splitlines() and f"@ddptui:{n} lines {n}" in r.stderr.splitlines()
    hellos = [ln for ln in out if ln.startswith('@ddptui {"k":"hello"')]
    assert len(hellos) == 3
    assert out[-1] == "main untagged"
    assert all(ln.startswith("@ddptui") for ln in out[:-1]), [ln for ln in out if not ln.startswith("@ddptui")]
