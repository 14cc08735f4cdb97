"""The headless engine never imports textual, and the dashboard process never imports torch."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.any_python

ROOT = Path(__file__).resolve().parent.parent

HEADLESS = """
import sys, pkgutil, importlib, ddptui.runners as runners
for m in pkgutil.walk_packages(runners.__path__, 'ddptui.runners.'):
    if not m.name.startswith(('ddptui.runners.inject', 'ddptui.runners.workloads')):  # the ranks' side: imports torch
        importlib.import_module(m.name)
import ddptui.tui.cli, ddptui.tui.console
from ddptui.tui.cli import run_headless
from ddptui.runners.launch.profile.load import load_profile
code = run_headless(load_profile('profiles/cpu-smoke.yaml'), sys.argv[1])
bad = sorted(m for m in sys.modules if m.split('.')[0] in ('textual', 'torch'))
print('BAD', bad)
sys.exit(0 if code == 0 and not bad else 1)
"""

DASHBOARD = """
import sys
import ddptui.tui.app, ddptui.tui.cli, ddptui.runners.session, ddptui.runners.edge.record, ddptui.runners.launch.profile.load
print('BAD', sorted(m for m in sys.modules if m.split('.')[0] == 'torch'))
"""


@pytest.mark.timeout(120)
def test_headless_run_imports_neither_textual_nor_torch(tmp_path):
    p = subprocess.run([sys.executable, "-c", HEADLESS, str(tmp_path)], cwd=ROOT, capture_output=True, text=True,
                       timeout=100)
    assert "BAD []" in p.stdout, p.stdout[-1500:] + p.stderr[-1500:]
    assert p.returncode == 0


@pytest.mark.timeout(60)
def test_dashboard_never_imports_torch():
    p = subprocess.run([sys.executable, "-c", DASHBOARD], cwd=ROOT, capture_output=True, text=True, timeout=50)
    assert p.returncode == 0, p.stderr
    assert "BAD []" in p.stdout, p.stdout


def test_no_textual_import_statement_in_runners():
    offenders = [str(f) for f in (ROOT / "runners").rglob("*.py")
                 if any(line.lstrip().startswith(("import textual", "from textual"))
                        for line in f.read_text().splitlines())]
    assert not offenders


RUNS_LIST = """
import sys
from ddptui.tui.cli import main
code = main(['runs', '--runs-dir', sys.argv[1]])
print('BAD', sorted(m for m in sys.modules if m.split('.')[0] in ('textual', 'torch')))
sys.exit(code)
"""


@pytest.mark.timeout(60)
def test_the_runs_list_imports_neither_textual_nor_torch(tmp_path):
    """`ddptui runs` is headless: 1,000 records in a second leave no time for the dashboard's imports."""
    p = subprocess.run([sys.executable, "-c", RUNS_LIST, str(ROOT / "tests" / "fixtures" / "records")], cwd=ROOT,
                       capture_output=True, text=True, timeout=50)
    assert p.returncode == 0, p.stderr
    assert "BAD []" in p.stdout and "crash" in p.stdout, p.stdout
