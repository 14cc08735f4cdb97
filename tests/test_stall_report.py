"""What a user reads about a hang, from real runs: the culprit in their own code with its stack, no verdict from a
dump of a healthy run, and a hung DataLoader worker named with where it is."""
from __future__ import annotations

import io
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ddptui.runners import events as ev
from ddptui.runners.launch.profile.load import load_profile
from ddptui.runners.session import EXIT_STALLED, Session
from tests.support.engine import Recorder
from ddptui.tui.console import Console

pytestmark = pytest.mark.main_suite(
    "long end-to-end rank runs (the engine and dashboard under them are in the any_python set)")

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures"
# every shape of hang sentence, and the console's verdict tags
NOT_A_VERDICT = re.compile(r"stuck|mismatched|outside any collective|SLOW|slow but|lost peer|no rank is outside|\[stall\]|\[slow\]")


def _line(script: str, marker: str) -> int:
    return next(i for i, ln in enumerate((FIXTURES / script).read_text().splitlines(), 1) if marker in ln)


def _profile(tmp_path: Path, script: str, **fields) -> Path:
    """A profile for one of the plain rank programs in tests/fixtures, under torchrun with 2 ranks."""
    body = {"name": Path(script).stem.replace("_", "-"), "runner": "torchrun", "nproc": 2, "backend": "gloo",
            "stall_after": 3, "on_stall": "stop", "timeout": 150, **fields}
    text = "\n".join(f"{k}: {v}" for k, v in body.items()) + f"\nworkload:\n  script: {FIXTURES / script}\n"
    path = tmp_path / f"{body['name']}.yaml"
    path.write_text(text)
    return path


def _events(run_dir: Path) -> list[dict]:
    return [json.loads(ln) for ln in (run_dir / "events.jsonl").read_text().splitlines() if ln.strip()]


@pytest.mark.timeout(150)
def test_stall_names_the_user_function_and_the_console_prints_its_stack(tmp_path, runs_dir):
    lock, allreduce = _line("lock_wait_ddp.py", "# LOCK_LINE"), _line("lock_wait_ddp.py", "# ALL_REDUCE_LINE")
    p = subprocess.run([sys.executable, "-m", "ddptui.tui.cli", "--runs-dir", str(runs_dir),
                        str(_profile(tmp_path, "lock_wait_ddp.py")), "--no-ui"],
                       cwd=ROOT, capture_output=True, text=True, timeout=140)
    assert p.returncode == EXIT_STALLED, p.stdout[-3000:] + p.stderr[-2000:]
    (run,) = runs_dir.iterdir()
    (hv,) = [e for e in _events(run) if e["kind"] == "hang_verdict"]
    assert hv["culprits"] == [1] and hv["waiting"] == [0], hv
    # Flight Recorder's finding leads (issue 14), the culprit's own frame from its stack ends it
    assert re.match(r"collective #\d+ \(all_reduce, 1 tensor \[1, 8\] float32, default group\): "
                    rf"rank 0 entered it at lock_wait_ddp.py:{allreduce}, rank 1 never did \(its last was #\d+\); "
                    rf"rank 1 is stuck in wait_for_lock\(\) at lock_wait_ddp.py:{lock} "
                    r"\(calls threading.Event.wait\), step 10; no progress since ", hv["text"]), hv["text"]
    w1 = hv["where"]["1"]
    assert (w1["func"], w1["line"], w1["calls"], w1["thread"], w1["step"]) == ("wait_for_lock", lock, "threading.Event.wait",
                                                                              "MainThread", 10)
    out = p.stdout.splitlines()
    i = next(k for k, ln in enumerate(out) if "[stall] collective #" in ln and "rank 1 is stuck in wait_for_lock()" in ln)
    # the culprit's stack follows the verdict: its own frame first, the library frames it calls folded into one line
    assert out[i + 1] == "    rank 1, thread MainThread, innermost user frame first:"
    assert out[i + 2] == f"      wait_for_lock() at lock_wait_ddp.py:{lock}    threading.Event().wait()  # LOCK_LINE"
    assert re.fullmatch(r"          \.\.\. calls threading\.Event\.wait: \d frames in threading\.py", out[i + 3]), out[i + 3]
    assert out[i + 4].startswith("      main() at lock_wait_ddp.py:")
    stacks_line = next(ln for ln in out[i + 4:] if ln.startswith("    stacks: "))
    assert stacks_line == f"    stacks: {run / 'stacks' / '01-stall'}/"
    # ddptui's own helper thread comes last in the record's stack file
    text = (run / "stacks" / "01-stall" / "rank1.txt").read_text()
    assert text.index('"MainThread"') < text.index('"ddptui-report"'), text


@pytest.mark.timeout(150)
def test_dump_of_a_healthy_run_records_stacks_and_says_no_verdict(tmp_path, runs_dir):
    profile = load_profile(_profile(tmp_path, "healthy_ddp_loop.py", stall_after=60, on_stall="stop"), [])
    rec, out = Recorder(), io.StringIO()
    console = Console(out, color=False)
    asked: list[str] = []

    def emit(batch):
        rec(batch)
        console.handle(batch)
        hellos = len(rec.of(ev.RankHello))
        dumps = len(rec.of(ev.StacksCollected))
        if hellos == 2 and not asked:  # at start-up: both ranks are up, neither has made a step
            asked.append("start")
            session.request_dump()
        elif dumps == 1 and len(asked) == 1 and any((e.step or 0) >= 30 for e in rec.of(ev.Progress)):
            asked.append("mid-run")  # mid-run: ranks in and out of DDP's all-reduce at slightly different moments
            session.request_dump()
        elif dumps == 2 and len(asked) == 2:
            asked.append("stop")
            session.request_stop()

    session = Session(profile, runs_dir, emit=emit)
    code = session.run()
    assert asked == ["start", "mid-run", "stop"], (asked, out.getvalue()[-3000:])
    assert code == 1 and session.status == "stopped"
    collected = rec.of(ev.StacksCollected)
    assert len(collected) == 2 and all(set(s.threads) == {0, 1} for s in collected)
    assert all(s.method[r] == "py-spy" for s in collected for r in (0, 1)), [s.method for s in collected]
    assert not rec.of(ev.StallDetected)
    assert not rec.of(ev.HangVerdict), [v.text for v in rec.of(ev.HangVerdict)]
    text = out.getvalue()
    assert not [ln for ln in text.splitlines() if NOT_A_VERDICT.search(ln)]
    assert all(s.why == "on request" for s in collected)
    assert session.hang is None and json.loads((session.run_dir / "summary.json").read_text())["hang"] is None
    folders = sorted((session.run_dir / "stacks").iterdir())
    for folder in folders:  # no verdict.txt; fr/ once the ranks' debug servers run (not yet at start-up, maybe)
        assert {p.name for p in folder.iterdir()} - {"fr"} == {"rank0.txt", "rank1.txt", "stacks.json"}
    assert {p.name for p in (folders[1] / "fr").iterdir()} == {"rank_0", "rank_1"}  # mid-run: Flight Recorder too
    said = [ln for ln in text.splitlines() if "stacks of" in ln]
    assert len(said) == 4 and sum("no rank is stalled: no verdict" in ln for ln in said) == 2, said


@pytest.mark.timeout(150)
def test_dataloader_worker_hang_names_the_worker_and_its_function(tmp_path, runs_dir):
    slow = _line("dataloader_worker_hang.py", "# SLOW_LOAD_LINE")
    profile = load_profile(_profile(tmp_path, "dataloader_worker_hang.py"), [])
    rec, out = Recorder(), io.StringIO()
    console = Console(out, color=False)
    session = Session(profile, runs_dir, emit=lambda b: (rec(b), console.handle(b)))
    assert session.run() == EXIT_STALLED, out.getvalue()[-3000:]
    hv = rec.of(ev.HangVerdict)[0]
    assert hv.culprits == (0,) and hv.waiting == (1,), hv.text
    wk = hv.where[0]["worker"]
    assert wk["worker_id"] == 1 and wk["func"] == "slow_load" and wk["line"] == slow, wk
    # Flight Recorder's finding leads (issue 14): rank 0 never entered the all_reduce; its stack says why
    assert hv.text.startswith("collective #") and "rank 0 never did" in hv.text, hv.text
    assert (f"; rank 0 waits for its DataLoader worker 1 (pid {wk['pid']}), which is in slow_load() at "
            f"dataloader_worker_hang.py:{slow} (calls time.sleep), step ") in hv.text, hv.text
    stacks = rec.of(ev.StacksCollected)[0]
    assert {w["worker_id"] for w in stacks.workers[0]} == {0, 1} and {w["pid"] for w in stacks.workers[0]} >= {wk["pid"]}
    text = out.getvalue()
    assert f"    rank 0's DataLoader worker 1 (pid {wk['pid']}), thread MainThread, innermost user frame first:" in text
    assert f"      slow_load() at dataloader_worker_hang.py:{slow}    time.sleep(3600)  # SLOW_LOAD_LINE" in text
    assert "DataLoader worker 1" in (session.run_dir / "stacks" / "01-stall" / "rank0.txt").read_text()


@pytest.mark.timeout(150)
def test_d_in_the_dashboard_on_a_healthy_run_shows_stacks_and_no_diagnosis(tmp_path, runs_dir):
    import asyncio

    from tests.support.ui import SIZE, until
    from tests.support.wait import Deadline
    from ddptui.tui.app import DdpApp, LiveSource
    from ddptui.tui.widgets.banner import Banner

    profile = load_profile(_profile(tmp_path, "healthy_ddp_loop.py", stall_after=60), [])

    async def drive():
        app = DdpApp(source=LiveSource(profile, runs_dir))
        async with app.run_test(size=SIZE) as pilot:
            deadline = Deadline(120, "the run")
            m = app.model
            await until(pilot, lambda: m.ranks and all((rv.step or 0) >= 20 for rv in m.ranks.values()),
                        deadline.left(), "the run to reach step 20", step=0.1,
                        stop_if=lambda: None if app.running else "the run ended")
            await pilot.press("d")
            await until(pilot, lambda: m.stacks is not None, deadline.left(), "stacks after d", step=0.1)
            await pilot.pause(0.5)  # the engine's turn after the dump, and a redraw
            banner = str(app.screen.query_one(Banner).render())
            view = str(app.screen.query_one("#stacks-view .stacks-text").render())
            await pilot.press("s")
            await until(pilot, lambda: not app.running, deadline.left(), "the run to stop after s", step=0.2)
            return m, banner, view

    m, banner, view = asyncio.run(drive())
    assert m.hang is None and m.stall is None and set(m.stacks.threads) == {0, 1}
    assert not NOT_A_VERDICT.search(banner), banner
    assert "no rank is stalled, so no verdict" in view and "(culprit)" not in view and "(waiting)" not in view, view
    assert "rank 0" in view and "thread MainThread" in view
