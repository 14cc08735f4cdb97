"""A closed terminal (SIGHUP) stops a run as a stop signal does: the headless console and the dashboard in a real
terminal (tmux) hung up mid-run, and the dashboard's own watch for a hang-up that brings no SIGHUP. A ddptui killed
outright (SIGKILL) leaves its socket folder: the next run sweeps it, never a live engine's."""
from __future__ import annotations

import json
import os
import pty
import shlex
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import psutil
import pytest

from tests.support.terminal import TMUX, Term
from tests.support.wait import wait_until

pytestmark = [
    pytest.mark.main_suite(
        "long end-to-end rank runs (the engine and dashboard under them are in the any_python set); its plain"
        " torchrun command runs on the test's own interpreter"),
]

ROOT = Path(__file__).resolve().parent.parent
TRAIN_LONG = ROOT / "tests" / "fixtures" / "train_ddp_long.py"  # a plain gloo DDP loop that runs until stopped


def _ddptui(runs: Path) -> psutil.Process | None:
    for p in psutil.process_iter(["cmdline"]):
        cmd = p.info["cmdline"] or []
        if "ddptui.tui.cli" in cmd and str(runs) in cmd:
            return p
    return None


def _training(runs: Path) -> Path | None:
    for run in runs.glob("*"):
        log = run / "rank1.log"
        if log.exists() and "step 20 loss" in log.read_text(errors="replace"):
            return run
    return None


@pytest.mark.skipif(not Path(TMUX).exists(), reason="tmux not installed")
@pytest.mark.timeout(180)
@pytest.mark.parametrize("front", ["headless", "dashboard"])
def test_a_closed_terminal_stops_the_run_with_its_summary_and_leaves_nothing(tmp_path, front):
    """Before: SIGHUP killed ddptui at once: no summary.json, its socket folder and ddptui.pid left behind."""
    runs = tmp_path / "runs"
    torchrun = Path(sys.executable).parent / "torchrun"
    cmd = (f"unset COLUMNS LINES; cd {shlex.quote(str(ROOT))} && {shlex.quote(sys.executable)} -m ddptui.tui.cli"
           f" --runs-dir {shlex.quote(str(runs))}" + (" --no-ui" if front == "headless" else "")
           + f" -- {shlex.quote(str(torchrun))} --standalone --nproc_per_node=2 {shlex.quote(str(TRAIN_LONG))};"
           " sleep 60")
    term = Term(cmd, 120, 30)
    try:
        run = wait_until(lambda: _training(runs), 120, "both ranks training", step=0.2)
        me = wait_until(lambda: _ddptui(runs), 10, "the ddptui process", step=0.2)
        ranks = me.children(recursive=True)
        env = json.loads((run / "plan.json").read_text())["procs"][0]["env"]
        sockets = Path(env["DDPTUI_SOCKETS"])
        assert sockets.is_dir() and len(ranks) >= 3  # torchrun and its two ranks
    finally:
        term.close()  # the tmux server goes: the pane's terminal hangs up, its shell dies, ddptui gets SIGHUP
    me.wait(45)  # the stop's bound is 30 s; a dashboard leaves at most 5 s after the run ended
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "stopped" and summary["exit_code"] == 1, summary
    log = (run / "launcher.log").read_text()
    # SIGHUP, or (the dashboard) its own watch of the terminal, which may see the hang-up first
    said = "(the terminal hung up, SIGHUP)" if front == "headless" else "(the terminal hung up"
    assert f"ddptui: stop requested {said}" in log, log[-2000:]
    assert not [p for p in ranks if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert not sockets.exists() and not (run / "ddptui.pid").exists()


class _Session:
    def __init__(self) -> None:
        self.why = None
        self.done = threading.Event()

    def request_stop(self, why: str = "") -> None:
        self.why = why
        self.done.set()


@pytest.mark.timeout(30)
def test_a_hang_up_without_sighup_is_seen_and_stops_the_run():
    """A terminal whose shell ignored SIGHUP (so none reached ddptui) hangs up: before, the dashboard blocked for good
    in a write to it while the run trained on unwatched."""
    from ddptui.tui.app_signals import AppSignals

    master, slave = pty.openpty()
    session = _Session()
    left = []
    app = SimpleNamespace(running=True, source=SimpleNamespace(session=session), engine_done=session.done,
                          run_code=1, leave_on_signal=lambda why: None, _driver=None)
    sig = AppSignals(app, bound=10, grace=0.2, exit_fn=left.append, terminals={slave})
    old = signal.getsignal(signal.SIGHUP)
    sig.install()
    try:
        time.sleep(0.5)
        assert session.why is None and not left  # a live terminal: nothing happens
        os.close(master)  # the terminal hangs up; no SIGHUP is sent to this process by anyone but the watch
        wait_until(lambda: left, 10, "ddptui to leave", step=0.2)
    finally:
        sig.restore()
        os.close(slave)
    assert signal.getsignal(signal.SIGHUP) == old
    assert session.why == "the terminal hung up" and left == [1]


@pytest.mark.timeout(150)
def test_a_killed_ddptuis_socket_folder_is_swept_by_the_next_run_and_a_live_ones_kept(tmp_path):
    from ddptui.runners.launch import fr_env
    from ddptui.runners.launch.profile.load import adhoc_profile

    runs = tmp_path / "runs"
    cli = [sys.executable, "-m", "ddptui.tui.cli", "--runs-dir", str(runs), "--no-ui", "--"]
    torchrun = Path(sys.executable).parent / "torchrun"
    killed = subprocess.Popen(cli + [str(torchrun), "--standalone", "--nproc_per_node=2", str(TRAIN_LONG)], cwd=ROOT,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    live = None
    try:
        run = wait_until(lambda: _training(runs), 120, "both ranks training", step=0.2)
        ranks = psutil.Process(killed.pid).children(recursive=True)
        dead = Path(json.loads((run / "plan.json").read_text())["procs"][0]["env"]["DDPTUI_SOCKETS"])
        killed.kill()  # no handler runs: the ranks end by PDEATHSIG (torchrun's SIGTERM), the folder stays
        killed.wait(10)
        wait_until(lambda: not [p for p in ranks if p.is_running() and p.status() != psutil.STATUS_ZOMBIE], 60,
                   "the killed ddptui's ranks to end", step=0.2)
        assert (dead / fr_env.OWNER).is_file() and not (run / "summary.json").exists()
        live_run = tmp_path / "live-run"
        live_run.mkdir()
        live, _ = fr_env.prepare(adhoc_profile(["true"]), live_run)  # an engine that runs: this process
        r = subprocess.run(cli + [sys.executable, "-c", "print('hello')"], cwd=ROOT, capture_output=True, text=True,
                           timeout=60)
        assert r.returncode == 0, r.stdout[-2000:] + r.stderr
        assert not dead.exists() and Path(live, fr_env.OWNER).is_file()
        (nxt,) = [d for d in runs.iterdir() if d != run]
        log = (nxt / "launcher.log").read_text()
        assert "socket folder(s) of ddptui runs that were killed" in log and str(dead) in log, log
        assert str(live) not in log
    finally:
        if killed.poll() is None:
            killed.kill()
            killed.wait()
        fr_env.remove(live)
