"""Profiles, workloads and injected code are found from an installed package, not only from a checkout."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.main_suite(
    "pip-installs the checkout with the test's interpreter (test-pythons installs it on each Python)")

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.timeout(240)
def test_installed_package_finds_its_profiles_and_workloads(tmp_path):
    target = tmp_path / "site"
    pip = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                          "--target", str(target), str(ROOT)], capture_output=True, text=True, timeout=200)
    assert pip.returncode == 0, pip.stderr[-2000:]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {**os.environ, "PYTHONPATH": str(target)}
    listing = subprocess.run([sys.executable, "-m", "ddptui.tui.cli", "profiles"], cwd=elsewhere, env=env,
                             capture_output=True, text=True, timeout=60)
    assert listing.returncode == 0, listing.stderr
    assert "cpu-ddp" in listing.stdout and "(invalid)" not in listing.stdout.replace("xla", "")
    plan = subprocess.run([sys.executable, "-m", "ddptui.tui.cli", "cpu-ddp", "--dry-run"], cwd=elsewhere, env=env,
                          capture_output=True, text=True, timeout=60)
    assert plan.returncode == 0, plan.stderr
    assert str(target / "ddptui" / "runners" / "workloads" / "ddp_mlp.py") in plan.stdout
    assert f"PYTHONPATH={target / 'ddptui' / 'runners' / 'inject'}" in plan.stdout
    assert (target / "ddptui" / "runners" / "inject" / "sitecustomize.py").exists()
    # one namespace installed: no generic top-level names that collide with other packages
    assert sorted(p.name for p in target.iterdir() if not p.name.endswith(".dist-info")) in (["ddptui"], ["bin", "ddptui"])
