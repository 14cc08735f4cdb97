"""The dashboard's rank panes on a REAL torchrun run: each pane ends on its rank's newest line, live and after the end."""
from __future__ import annotations

import shlex
import sys
from pathlib import Path

import pytest
from textual.widgets import TabbedContent

from ddptui.runners.launch.profile.load import load_profile
from tests.support.ui import aio, screen_text, until
from tests.support.terminal import TMUX, Term
from ddptui.tui.app import DdpApp, LiveSource

pytestmark = pytest.mark.main_suite(
    "long end-to-end rank runs (the engine and dashboard under them are in the any_python set)")

FIXTURES = Path(__file__).resolve().parent / "fixtures"
ROOT = Path(__file__).resolve().parent.parent


def chatty_profile(tmp_path: Path, hold: Path) -> Path:
    # stall_after: the ranks hold without progress until the test saw their last lines, however loaded the machine
    prof = tmp_path / "chatty.yaml"
    prof.write_text(f"name: chatty\nnproc: 2\nsteps: 40\nworkload:\n  script: {FIXTURES / 'chatty_ddp.py'}\n"
                    f"  args: ['40']\nenv:\n  HOLD_FILE: {hold}\ntimeout: 120\nstall_after: 300\n")
    return prof


def last_lines_shown(app) -> list[int]:
    text = screen_text(app)
    return [r for r in (0, 1) if f"[rank {r}] done, final loss" in text]


@pytest.mark.timeout(150)
@pytest.mark.parametrize("size", [(160, 48), (80, 24)])
@aio
async def test_each_pane_ends_on_its_ranks_last_line_live_and_after_the_end(size, tmp_path, runs_dir):
    hold = tmp_path / "hold"
    app = DdpApp(source=LiveSource(load_profile(chatty_profile(tmp_path, hold)), runs_dir))
    async with app.run_test(size=size) as pilot:
        # the ranks printed their last line and wait: the panes must show it while the run is live
        await until(pilot, lambda: last_lines_shown(app) == [0, 1] or not app.running, 90,
                    "both ranks' last lines on screen", step=0.1)
        assert app.running, screen_text(app)
        assert last_lines_shown(app) == [0, 1], screen_text(app)
        hold.touch()
        await until(pilot, lambda: not app.running, 60, "the run to finish", step=0.1)
        assert app.run_code == 0, app.run_error
        # the end banner took rows from the grid while the verdict tab was in front
        await until(pilot, lambda: app.screen.query_one(TabbedContent).active == "verdict", 5, "the verdict tab",
                    step=0.1)
        await pilot.press("escape")
        await until(pilot, lambda: last_lines_shown(app) == [0, 1], 5, "both ranks' last lines on screen", step=0.1)


@pytest.mark.skipif(not Path(TMUX).exists(), reason="tmux not installed")
@pytest.mark.timeout(180)
@pytest.mark.parametrize("size", [(160, 48), (80, 24)])
def test_in_a_real_terminal_each_pane_ends_on_its_ranks_last_line(size, tmp_path):
    hold = tmp_path / "hold"
    prof = chatty_profile(tmp_path, hold)
    cmd = (f"unset COLUMNS LINES; cd {shlex.quote(str(ROOT))} && {shlex.quote(sys.executable)} -m ddptui.tui.cli "
           f"{shlex.quote(str(prof))} --runs-dir {shlex.quote(str(tmp_path / 'runs'))}; echo DDPTUI-EXITED $?; sleep 30")
    term = Term(cmd, width=size[0], height=size[1])
    try:
        term.wait_for("[rank 0] done, final loss", 120)
        s = term.wait_for("[rank 1] done, final loss", 10)
        assert "live" in s  # the ranks hold: these are the newest lines of a running run
        hold.touch()
        term.wait_for("run ok", 60)
        term.keys("Escape")  # from the verdict tab back to the grid
        s = term.wait_for("rank 1 · pid", 10)
        assert "exited ok" in s and "[rank 0] done, final loss" in s and "[rank 1] done, final loss" in s, s
        term.keys("q")
        assert "DDPTUI-EXITED 0" in term.wait_for("DDPTUI-EXITED", 20)
    finally:
        term.close()
