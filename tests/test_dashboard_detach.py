"""The dashboard's run in a real terminal (tmux): its engine is a process of its own, held by the dashboard; D leaves
the dashboard, the screen says how to come back, and the run goes on unwatched to its own end, which a viewer started
later (`ddptui attach RUN_DIR --no-ui`) sees."""
from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from tests.support.cli import ROOT, Output
from tests.support.terminal import TMUX, Term

pytestmark = [
    pytest.mark.main_suite("a real 2-rank run under the dashboard in tmux, then a viewer process"),
    pytest.mark.skipif(not Path(TMUX).exists(), reason="tmux not installed"),
]

LOOP = ROOT / "tests" / "fixtures" / "held_ddp_loop.py"  # plain DDP: trains until $HOLD exists, then 10 steps


def _ddptuis(runs: Path) -> list[psutil.Process]:
    return [p for p in psutil.process_iter(["cmdline"])
            if "ddptui.tui.cli" in (p.info["cmdline"] or []) and str(runs) in p.info["cmdline"]]


@pytest.mark.timeout(150)
def test_d_detaches_the_dashboard_and_the_run_goes_on_to_its_end(tmp_path):
    runs, hold = tmp_path / "runs", tmp_path / "hold"
    cmd = (f"unset COLUMNS LINES; cd {shlex.quote(str(ROOT))} && HOLD={shlex.quote(str(hold))} "
           f"{shlex.quote(sys.executable)} -m ddptui.tui.cli --runs-dir {shlex.quote(str(runs))} --set nproc=2 -- "
           f"{shlex.quote(sys.executable)} {shlex.quote(str(LOOP))}; echo DDPTUI-EXITED $?; sleep 60")
    term = Term(cmd)
    viewer = None
    try:
        term.wait_until(lambda s: "rank 1 · pid" in s and "step 3 loss" in s, 90, "both ranks training")
        (run,) = runs.iterdir()
        procs = _ddptuis(runs)
        (engine,) = [p for p in procs if "--engine-ready-fd" in p.info["cmdline"]]
        (dash,) = [p for p in procs if p is not engine]
        assert os.getsid(engine.pid) == engine.pid != os.getsid(dash.pid)  # no terminal of its own to lose
        assert json.loads((run / "engine.json").read_text())["pid"] == engine.pid
        term.keys("D")
        s = term.wait_for("DDPTUI-EXITED", 30)
        assert "DDPTUI-EXITED 0" in s and f"come back: ddptui attach {run.resolve()}" in s, s
        dash.wait(10)
        assert engine.is_running() and not (run / "summary.json").exists()  # the run goes on without its dashboard
        viewer = subprocess.Popen([sys.executable, "-m", "ddptui.tui.cli", "attach", str(run), "--no-ui"], cwd=ROOT,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        out = Output(viewer)
        out.wait(lambda: "[rank 1] step " in out.text(), 60, "the viewer to show the run's steps")
        hold.touch()  # the run ends by itself: 10 more steps
        assert viewer.wait(60) == 0
        text = out.all()
        assert "status: ok (exit 0)" in text, text[-2000:]
        engine.wait(30)
    finally:
        term.close()
        if viewer is not None and viewer.poll() is None:
            viewer.kill()
            viewer.wait()
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "ok" and summary["exit_code"] == 0, summary
    assert not (run / "control.sock").exists() and not psutil.pid_exists(engine.pid)


@pytest.mark.timeout(120)
def test_a_killed_dashboard_stops_its_run_which_it_held(tmp_path):
    """Without D, the run lives as long as its dashboard: SIGKILL to the dashboard (no handler runs) drops its held
    connection, and the engine stops the run with its summary."""
    runs = tmp_path / "runs"
    cmd = (f"unset COLUMNS LINES; cd {shlex.quote(str(ROOT))} && HOLD={shlex.quote(str(tmp_path / 'never'))} "
           f"{shlex.quote(sys.executable)} -m ddptui.tui.cli --runs-dir {shlex.quote(str(runs))} --set nproc=2 -- "
           f"{shlex.quote(sys.executable)} {shlex.quote(str(LOOP))}; sleep 60")
    term = Term(cmd)
    try:
        term.wait_until(lambda s: "rank 1 · pid" in s and "step 3 loss" in s, 90, "both ranks training")
        (run,) = runs.iterdir()
        procs = _ddptuis(runs)
        (engine,) = [p for p in procs if "--engine-ready-fd" in p.info["cmdline"]]
        (dash,) = [p for p in procs if p is not engine]
        ranks = engine.children(recursive=True)
        assert len(ranks) == 2
        dash.kill()
        engine.wait(45)
    finally:
        term.close()
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "stopped" and summary["exit_code"] == 1, summary
    assert "stop requested (the dashboard that launched the run went away without detaching)" in \
        (run / "events.jsonl").read_text() + "".join(p.read_text() for p in run.glob("*.log"))
    assert not [p for p in ranks if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
