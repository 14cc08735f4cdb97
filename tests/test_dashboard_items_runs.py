"""Issue 15's small dashboard items on REAL runs: a preflight failure's reason in the banner (a mirage profile without
mirage), and a real torchrun run whose replicas differ and whose ranks tag their own lines: the console and the
replayed dashboard say each thing once."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from textual.widgets import DataTable

from ddptui.runners.launch.profile.load import load_profile
from ddptui.tui.app import DdpApp, LiveSource
from ddptui.tui.replay import ReplaySource
from ddptui.tui.widgets.banner import Banner
from tests.support.ui import SIZE, aio, screen_text, settle, until

pytestmark = pytest.mark.main_suite("its wrapped torchrun runs on the test's own interpreter")

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"


@pytest.mark.timeout(120)
@aio
async def test_a_real_preflight_failure_says_its_reason_in_the_banner(runs_dir, monkeypatch):
    """mi350x-smoke names mirage; with no mirage on PATH the engine refuses to launch (exit 2). The banner said only
    `run preflight failed (exit code 2)`; the reason was a launcher line in the Timeline, cut at the screen's edge."""
    path = os.pathsep.join([str(Path(sys.executable).parent), "/usr/bin", "/bin"])
    if shutil.which("mirage", path=path):
        pytest.skip("mirage is installed on this machine's PATH: no preflight failure to see")
    monkeypatch.setenv("PATH", path)
    profile = load_profile(ROOT / "profiles" / "mi350x-smoke.yaml")
    app = DdpApp(source=LiveSource(profile, runs_dir))
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: not app.running and app.drawn, 100, "the preflight to fail")
        assert app.run_code == 2 and app.model.finished.status == "preflight failed"
        banner = str(app.screen.query_one(Banner).render())
        assert "preflight failed (exit code 2): mirage not found" in banner, banner
        assert "fix: put mirage on PATH" in banner
        head = str(app.screen.query_one("#verdict-view .verdict-head").render())
        assert "preflight: mirage not found" in head
    summary = (Path(app.model.run_dir) / "summary.json").read_text()
    assert '"preflight"' in summary and "mirage not found" in summary


def wrapped_run(runs_dir: Path, script: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    env.pop("NO_COLOR", None)
    return subprocess.run([sys.executable, "-m", "ddptui.tui.cli", "--runs-dir", str(runs_dir), "--no-ui", "--",
                           "torchrun", "--standalone", "--nproc_per_node=2", str(script)],
                          cwd=ROOT, capture_output=True, text=True, timeout=100, env=env)


@pytest.mark.timeout(180)
@aio
async def test_differing_replicas_and_self_tagged_lines_are_said_once(runs_dir):
    """ddp_rank_dependent_update.py prints `[rank N] step ...` itself and torch tags its warnings `[rankN]:`; rank 1
    scales its weights after step 3. The console printed `[rank 1] [rank 1] step 4` and `replicas: replicas differ`;
    the Verdict tab `replicas: differ: replicas differ: ...`, then the parameter again, and a rank's end twice."""
    p = wrapped_run(runs_dir, FIXTURES / "ddp_rank_dependent_update.py")
    assert p.returncode == 4, p.stdout[-3000:] + p.stderr[-2000:]
    out = p.stdout
    assert re.search(r"\] \[rank 1\] step 4 loss", out), out[-3000:]
    assert not re.search(r"\[rank (\d)\] \[rank ?\1\]", out), out[-3000:]  # one tag per line
    assert "replicas: replicas" not in out and "replicas differ: first differing parameter '2.weight'" in out
    record = next(runs_dir.iterdir())
    assert "[rank 1] step 4" in (record / "rank1.log").read_text()  # the record keeps the line as the rank wrote it

    app = DdpApp(source=ReplaySource(record))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app, 60)
        screen = app.screen
        assert screen.query_one("#tabs").active == "verdict"
        head = str(screen.query_one("#verdict-view .verdict-head").render())
        assert head.count("replicas differ") == 2, head  # "status: ✗ replicas differ" and the verdict's own sentence
        assert head.count("2.weight") == 1 and "differ: replicas" not in head, head
        banner = str(screen.query_one(Banner).render())
        assert banner.count("replicas differ") == 2 and "replicas: replicas" not in banner, banner  # status, verdict
        table = screen.query_one("#summary-table", DataTable)
        labels = [str(c.label) for c in table.columns.values()]
        assert len(labels) == len(set(labels)) and "outcome" not in labels, labels
        cells = [str(c) for c in table.get_row_at(1)]
        assert sum("exited" in c for c in cells) == 1, cells
        await pilot.press("t")
        await until(pilot, lambda: re.search(r"rank 1 +step 4 loss", screen_text(app)), 10, "rank 1's step 4")
        lines = screen_text(app).splitlines()
        assert not any(re.search(r"rank (\d) .*\[rank ?\1\]", ln) for ln in lines), lines
