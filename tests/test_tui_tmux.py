"""The real `python -m ddptui.tui.cli` in a real terminal (tmux): pick a profile with keys, watch the run, read the screen."""
from __future__ import annotations

import shlex
import sys
import time
from pathlib import Path

import pytest

from tests.tmux_term import TMUX, Term

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.skipif(not Path(TMUX).exists(), reason="tmux not installed")


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
