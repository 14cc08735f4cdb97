"""The real `python -m ddptui.tui.cli` in a real terminal (tmux): pick a profile with keys, watch the run, read the screen."""
from __future__ import annotations

import json
import shlex
import sys
import time
from pathlib import Path

import pytest

from tests.support.terminal import TMUX, Term

ROOT = Path(__file__).resolve().parent.parent

pytestmark = [
    pytest.mark.main_suite(
        "long end-to-end rank runs (the engine and dashboard under them are in the any_python set)"),
    pytest.mark.skipif(not Path(TMUX).exists(), reason="tmux not installed"),
]


@pytest.mark.timeout(150)
def test_pick_a_profile_with_keys_and_watch_it_finish(tmp_path):
    runs = tmp_path / "runs"
    # Textual believes COLUMNS/LINES over the terminal; a client-less tmux server may hand the pane 80x24 ones.
    cmd = (f"unset COLUMNS LINES; cd {shlex.quote(str(ROOT))} && {shlex.quote(sys.executable)} -m ddptui.tui.cli --runs-dir {shlex.quote(str(runs))};"
           " echo DDPTUI-EXITED $?; sleep 30")
    term = Term(cmd)
    try:
        s = term.wait_for("pick a profile", 30)
        assert "cpu-ddp" in s and "hang" in s
        term.wait_for("runner  torchrun", 10)  # the highlighted profile's resolved settings
        # A focus move shows nothing a capture of the screen could wait for, and sent in one go with the Tab, the
        # "x" did not reach the input (tried): the keys after a Tab still wait a moment.
        term.keys("Tab")  # nproc input
        time.sleep(0.3)
        term.keys("x")
        term.wait_for("expected an integer", 10)  # ProfileError's one line, in the UI
        term.keys("BSpace", "Tab")  # steps input
        time.sleep(0.3)
        term.keys("2", "0", "Enter")
        s = term.wait_for("run ok", 120)
        assert "20 steps" in s and "identical" in s
        assert "per-rank summary" in s  # the verdict tab came forward
        term.keys("Escape")
        # The pane titles say we are back on the grid; the whole grid, not a capture taken mid-redraw.
        term.wait_until(lambda s: "rank 1 · pid" in s and s.count("exited ok") >= 2 and s.count("step 20/20") >= 2,
                        10, "both panes finished")
        term.keys("q")
        s = term.wait_for("DDPTUI-EXITED", 20)
        assert "DDPTUI-EXITED 0" in s
        assert len(list(runs.iterdir())) == 1
    finally:
        term.close()


@pytest.mark.timeout(150)
def test_collectives_tab_shows_a_rank_falling_behind_before_any_stall(tmp_path):
    """A real 2-rank DDP run where rank 1 sleeps 6 s before every backward from step 1 (tests/fixtures/slow_rank_ddp.py,
    a plain PyTorch script): rank 0 waits in DDP's all_reduce, its Flight Recorder says so within 2-4 s, and the
    Collectives tab marks rank 1 BEHIND while the run goes on; nothing stalls (stall_after 120 s)."""
    runs = tmp_path / "runs"
    torchrun = Path(sys.executable).parent / "torchrun"
    cmd = (f"unset COLUMNS LINES; cd {shlex.quote(str(ROOT))} && SLOW_FROM=1 SLOW_SECONDS=6 STEPS=6 "
           f"{shlex.quote(sys.executable)} -m ddptui.tui.cli --runs-dir {shlex.quote(str(runs))} --set stall_after=120"
           f" -- {shlex.quote(str(torchrun))} --standalone --nproc_per_node=2 tests/fixtures/slow_rank_ddp.py;"
           " echo DDPTUI-EXITED $?; sleep 30")
    term = Term(cmd)
    try:
        term.wait_for("rank 1 · pid", 60)
        term.keys("o")
        term.wait_for("enqueued  completed", 10)
        s = term.wait_until(lambda s: "laggard: rank 1" in s and "BEHIND" in s, 90, "rank 1 marked behind")
        behind = [ln.split() for ln in s.splitlines() if "BEHIND" in ln]
        assert len(behind) == 1 and behind[0][0] == "1", s  # rank 1's row, the default group
        waiting = [ln for ln in s.splitlines() if "waiting" in ln and "all_reduce" in ln]
        assert waiting and waiting[0].split()[0] == "0", s  # rank 0 waits in DDP's gradient all_reduce
        assert "STALL" not in s
        s = term.wait_until(lambda s: "· ✓ ok" in s, 90, "the run to end ok")
        term.keys("q")
        s = term.wait_for("DDPTUI-EXITED", 20)
        assert "DDPTUI-EXITED 0" in s
    finally:
        term.close()
    events = [json.loads(ln) for d in runs.iterdir() for ln in (d / "events.jsonl").read_text().splitlines()]
    kinds = [e["kind"] for e in events]
    assert "stall" not in kinds
    assert any(e["kind"] == "collectives" and e["laggards"] == [1] for e in events)
