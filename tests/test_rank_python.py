"""The ranks' default interpreter: DDPTUI_PYTHON when set (ddptui on one Python, torch on another), else ddptui's own."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ddptui.runners.launch.profile.errors import ProfileError

from ddptui.runners.launch.profile.load import load_profile
from ddptui.runners.launch.rank_python import default_python

pytestmark = pytest.mark.any_python

ROOT = Path(__file__).resolve().parent.parent


def _exe(folder: Path, name: str = "python9", mode: int = 0o755) -> Path:
    exe = folder / name
    exe.write_text("#!/bin/sh\n")
    exe.chmod(mode)
    return exe


def test_unset_or_empty_is_ddptuis_own_interpreter():
    assert default_python({}) == sys.executable
    assert default_python({"DDPTUI_PYTHON": ""}) == sys.executable


def test_a_path_or_a_name_on_path(tmp_path):
    exe = _exe(tmp_path)
    assert default_python({"DDPTUI_PYTHON": str(exe)}) == str(exe)
    assert default_python({"DDPTUI_PYTHON": "python9", "PATH": f"/nonexistent{os.pathsep}{tmp_path}"}) == str(exe)


@pytest.mark.parametrize("value,expect", [
    ("/nonexistent/python", "DDPTUI_PYTHON=/nonexistent/python: interpreter not found: /nonexistent/python"),
    ("python-nowhere", "DDPTUI_PYTHON=python-nowhere: interpreter 'python-nowhere' not found on PATH"),
])
def test_nothing_runnable_is_one_line(tmp_path, value, expect):
    with pytest.raises(ValueError) as e:
        default_python({"DDPTUI_PYTHON": value, "PATH": str(tmp_path)})
    assert str(e.value) == expect


def test_not_executable(tmp_path):
    exe = _exe(tmp_path, mode=0o644)
    with pytest.raises(ValueError, match="interpreter is not executable"):
        default_python({"DDPTUI_PYTHON": str(exe)})


def test_profiles_that_name_no_interpreter_take_it(tmp_path, monkeypatch):
    exe = _exe(tmp_path)
    named = tmp_path / "named.yaml"
    named.write_text(f"workload: {{builtin: ddp_mlp, python: {sys.executable}}}\n")
    monkeypatch.setenv("DDPTUI_PYTHON", str(exe))
    assert load_profile(ROOT / "profiles" / "cpu-ddp.yaml").workload.python == str(exe)
    assert load_profile(named).workload.python == sys.executable  # the profile's own choice wins
    monkeypatch.setenv("DDPTUI_PYTHON", str(tmp_path / "missing"))
    with pytest.raises(ProfileError) as e:
        load_profile(ROOT / "profiles" / "cpu-ddp.yaml")
    assert "field 'workload.python': DDPTUI_PYTHON=" in str(e.value) and "\n" not in str(e.value)


@pytest.mark.timeout(60)
def test_cli_bad_value_exits_2_with_one_line(tmp_path):
    env = {**os.environ, "DDPTUI_PYTHON": str(tmp_path / "missing")}
    p = subprocess.run([sys.executable, "-m", "ddptui.tui.cli", "cpu-ddp", "--dry-run"], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=50)
    assert p.returncode == 2, p.stderr
    assert len(p.stderr.strip().splitlines()) == 1 and "DDPTUI_PYTHON=" in p.stderr, p.stderr
