"""A detached run (`ddptui PROFILE --detach`) followed by viewers in other processes (`ddptui attach RUN_DIR
--no-ui`): two at once, one asks for stacks and leaves while the run goes on, a stop through the control channel
writes the summary; an engine SIGKILLed mid-run makes its viewer say the record is incomplete."""
from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from ddptui.runners.edge import control
from tests.support.cli import ROOT, Output, ddptui
from tests.support.wait import wait_until

pytestmark = pytest.mark.main_suite("real torchrun ranks under a detached engine, followed by viewer processes")

# a plain 2-rank gloo DDP loop under the user's own torchrun that runs until it is stopped (a line every 10 steps)
LOOP = ROOT / "tests" / "fixtures" / "healthy_ddp_loop.py"
ENDLESS = ("--set", "timeout=120", "--", str(Path(sys.executable).parent / "torchrun"), "--standalone",
           "--nproc_per_node=2", str(LOOP))


def detach(runs: Path) -> tuple[Path, int]:
    p = ddptui("--detach", *ENDLESS, runs_dir=runs, timeout=60)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[0].startswith("run: ") and lines[1].startswith("engine: pid "), p.stdout
    run, pid = Path(lines[0][5:]), int(lines[1].split()[-1])
    command = lines[2].removeprefix("watch it: ").split("   (")[0]
    assert shlex.split(command) == ["ddptui", "attach", str(run)], lines[2]  # a shell gives it the folder whole
    assert control.ask(run, "ping")["pid"] == pid  # usable as printed
    return run, pid


def viewer(runs: Path, run: Path) -> tuple[subprocess.Popen, Output]:
    proc = subprocess.Popen([sys.executable, "-m", "ddptui.tui.cli", "attach", str(run), "--no-ui"], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return proc, Output(proc)


def steps_seen(out: Output) -> int:
    return out.text().count("[rank 1] step ")


@pytest.mark.timeout(120)
def test_two_viewers_follow_a_detached_run_one_dumps_and_leaves_and_a_stop_writes_the_summary(tmp_path):
    runs = tmp_path / "my runs"  # a folder with a space: the printed command quotes it
    run, pid = detach(runs)
    engine = psutil.Process(pid)
    procs = []
    try:
        assert os.getsid(pid) == pid != os.getsid(0)  # a session of its own: no terminal whose hangup reaches it
        assert (run / "engine.log").exists()
        (a, out_a), (b, out_b) = viewer(runs, run), viewer(runs, run)
        procs += [a, b]
        for out in (out_a, out_b):
            out.wait(lambda o=out: steps_seen(o) >= 3, 60, "a viewer to show rank 1's steps")
        a.send_signal(signal.SIGUSR1)  # stacks now, through the channel
        wait_until(lambda: list(run.glob("stacks/01-on-request/stacks.json")), 30, "the requested stacks",
                   seen=lambda: sorted(p.name for p in run.iterdir()))
        for out in (out_a, out_b):  # both viewers see what the engine took
            out.wait(lambda o=out: "stacks of 2 ranks collected in" in o.text() and "01-on-request" in o.text(), 30,
                     "each viewer to show the stacks taken")
        a.send_signal(signal.SIGINT)  # the viewer leaves; the run goes on
        assert a.wait(20) == 0
        assert "ddptui: left the run; it goes on" in out_a.all()
        assert engine.is_running() and not (run / "summary.json").exists()
        seen = steps_seen(out_b)
        out_b.wait(lambda: steps_seen(out_b) >= seen + 3, 30, "the run to go on after a viewer left")
        assert control.ask(run, "stop")["ok"]
        assert b.wait(60) == 1  # the run's own exit code: stopped
        text = out_b.all()
        assert "stop requested (asked through its control channel)" in text
        assert "status: stopped (exit 1)" in text
        assert (run / "summary.json").exists()
        engine.wait(30)
        assert control.state_of(run).state == "finished" and not (run / "control.sock").exists()
        again = ddptui("attach", str(run), "--no-ui", runs_dir=runs)  # a finished record: shown to its end
        assert again.returncode == 1 and "status: stopped (exit 1)" in again.stdout
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        if engine.is_running():
            engine.send_signal(signal.SIGTERM)
            engine.wait(30)


@pytest.mark.timeout(120)
def test_an_engine_killed_mid_run_makes_its_viewer_say_the_record_is_incomplete(tmp_path):
    runs = tmp_path / "runs"
    run, pid = detach(runs)
    engine = psutil.Process(pid)
    left: list[psutil.Process] = []
    v, out = viewer(runs, run)
    try:
        out.wait(lambda: steps_seen(out) >= 3, 60, "the viewer to show rank 1's steps")
        left = engine.children(recursive=True)  # the ranks outlive a SIGKILLed engine: the test ends them
        engine.kill()
        engine.wait(10)
        assert v.wait(30) == 1
        said = out.all()
        assert f"the engine (pid {pid}) died: the record is incomplete" in said
        assert "Traceback" not in said
        p = ddptui("attach", str(run), "--no-ui", runs_dir=runs)
        assert p.returncode == 2 and p.stderr.startswith(f"ddptui: attach: {run}: the engine (pid {pid}) died: the "
                                                         "record is incomplete; its control socket is stale")
        assert p.stderr.count("\n") == 1
    finally:
        if v.poll() is None:
            v.kill()
            v.wait()
        for c in left:
            try:
                c.kill()
            except psutil.Error:
                pass
        psutil.wait_procs(left, timeout=10)
