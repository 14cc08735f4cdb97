"""The compact per-rank view on a REAL torchrun run: the rank that failed first is on top, and Enter opens its log."""
from __future__ import annotations

from pathlib import Path

import pytest
from textual.widgets import Log

from ddptui.runners.launch.profile.load import load_profile
from ddptui.tui.app import DdpApp, LiveSource
from ddptui.tui.screens.zoom import ZoomScreen
from ddptui.tui.widgets.rank_table import RankTable
from tests.support.ui import aio, until

pytestmark = pytest.mark.main_suite(
    "long end-to-end rank runs (the engine and dashboard under them are in the any_python set)")

FIXTURES = Path(__file__).resolve().parent / "fixtures"


@pytest.mark.timeout(150)
@aio
async def test_the_rank_that_failed_first_tops_the_compact_view_of_a_real_run(tmp_path, runs_dir):
    # rank 1 raises at its step 5 while rank 0 works on alone, until torchrun stops it: both end failed
    prof = tmp_path / "dies.yaml"
    prof.write_text(f"name: dies\nnproc: 2\nworkload:\n  script: {FIXTURES / 'die_while_peer_works_alone.py'}\n"
                    "timeout: 120\n")
    app = DdpApp(source=LiveSource(load_profile(prof), runs_dir))
    async with app.run_test(size=(160, 48)) as pilot:
        await until(pilot, lambda: app.worker is not None and not app.running and app.drawn, 120, "the run's end")
        m = app.model
        assert m.crash is not None and m.crash.root_rank == 1, m.crash
        assert {m.rank(0).badge().split()[0], m.rank(1).badge().split()[0]} <= {"failed", "killed"}
        screen = app.screen
        assert not screen.compact_on  # two ranks: panes
        await pilot.press("m")  # rows, asked for at any size
        table = screen.query_one(RankTable)
        await until(pilot, lambda: screen.compact_on and table.display and app.focused is table, 10, "the rows")
        assert table.order == [1, 0]  # the root cause above rank 0, which failed after it
        top = table.render_lines_text()[1]
        assert top.startswith("✗ 1 ") and "failed" in top and "root cause" in top, top
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, ZoomScreen), 10, "the zoom screen")
        assert app.screen.rank == 1
        log = "\n".join(app.screen.query_one(Log).lines)
        assert "RuntimeError: rank 1 gave up at step 5" in log, log[-2000:]
