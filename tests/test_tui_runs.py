"""The Runs screen (R from the picker and the run screen) on a runs folder of the suite's real records and a cut one:
the rows newest first, enter replays a record on the run screen, R there lists its folder again; snapshots at 80x24
and 160x48, with and without NO_COLOR."""
from __future__ import annotations

from pathlib import Path

import pytest

import ddptui.tui.screens.picker as picker
from ddptui.tui.app import DdpApp
from ddptui.tui.screens.compare import CompareScreen
from ddptui.tui.screens.runs import RunsScreen
from ddptui.tui.widgets.banner import Banner
from tests.support.replay import PROFILES, replayed, runs_folder
from tests.support.ui import aio, screen_text, steady, until

pytestmark = [pytest.mark.any_python, pytest.mark.usefixtures("utc")]  # tests/conftest.py: the records' zone
SIZES = [(80, 24), (160, 48)]


def _app(monkeypatch, tmp_path) -> DdpApp:
    monkeypatch.setattr(picker, "find_profiles", lambda extra=None: [PROFILES / "cpu-ddp.yaml"])
    runs_folder(tmp_path)
    monkeypatch.chdir(tmp_path)  # the folder as a user names it: runs/
    return DdpApp(runs_root=Path("runs"))


async def _runs_shown(pilot) -> RunsScreen:
    await pilot.press("R")
    await until(pilot, lambda: isinstance(pilot.app.screen, RunsScreen) and pilot.app.screen.loaded, 20, "the runs")
    return pilot.app.screen


@pytest.mark.timeout(60)
@aio
async def test_runs_screen_lists_the_records_and_opens_one_in_replay(monkeypatch, tmp_path):
    app = _app(monkeypatch, tmp_path)
    async with app.run_test(size=(160, 48)) as pilot:
        screen = await _runs_shown(pilot)
        assert [r.name for r in screen.rows] == ["cpu-ddp", "crash", "crash", "hang", "slow"]
        assert [r.status for r in screen.rows] == ["ok", "incomplete", "failed", "stalled", "ok"]  # (same start)
        text = screen_text(app)
        assert "✗ failed" in text and "⚠ incomplete" in text and "runs/crash-killed" in text
        killed = screen.rows[1]
        assert killed.path.endswith("crash-killed") and "ends in a cut line" in killed.verdict
        await pilot.press("down", "down")  # the crash
        await until(pilot, lambda: "rank 1 failed first" in screen_text(app), 10, "the crash's verdict below")
        await pilot.press("enter")
        await until(pilot, lambda: app.source is not None and app.source.kind == "replay", 10, "the replay")
        assert Path(app.source.run_dir) == Path("runs/crash")
        await replayed(pilot)
        assert type(app.screen).__name__ == "RunScreen"
        assert "rank 1 failed first" in str(app.screen.query_one(Banner).render())
        again = await _runs_shown(pilot)  # R on the run screen: the replayed record's own folder
        assert again.runs_root == Path("runs") and len(again.rows) == 5
        await pilot.press("escape")
        await until(pilot, lambda: type(app.screen).__name__ == "RunScreen", 10, "back on the run screen")


@pytest.mark.timeout(60)
@aio
async def test_space_marks_records_and_c_compares_the_marked_ones_in_the_order_marked(monkeypatch, tmp_path):
    app = _app(monkeypatch, tmp_path)
    async with app.run_test(size=(160, 48)) as pilot:
        screen = await _runs_shown(pilot)
        await pilot.press("c")  # nothing marked: a line says how, no screen opens
        await pilot.pause()
        assert app.screen is screen
        await pilot.press("down", "down", "space")  # the crash; the cursor goes on to the next record
        assert list(screen.marked) == [str(Path("runs/crash"))] and screen.query_one("DataTable").cursor_row == 3
        assert "✓ crash" in screen_text(app)
        await pilot.press("c")  # one is not a comparison
        await pilot.pause()
        assert app.screen is screen
        await pilot.press("up", "up", "space")  # crash-killed marked...
        assert list(screen.marked) == [str(Path("runs/crash")), str(Path("runs/crash-killed"))]
        await pilot.press("up", "space")  # ... and unmarked
        assert list(screen.marked) == [str(Path("runs/crash"))] and "✓ crash-killed" not in screen_text(app)
        await pilot.press("up", "up", "space")  # cpu-ddp, marked second: B
        assert list(screen.marked) == [str(Path("runs/crash")), str(Path("runs/cpu-ddp"))]
        await pilot.press("c")
        await until(pilot, lambda: isinstance(app.screen, CompareScreen) and app.screen.loaded, 20, "the comparison")
        compare = app.screen
        assert compare.error == "" and compare.paths == [Path("runs/crash"), Path("runs/cpu-ddp")]
        assert compare.comparison is not None and len(compare.runs) == 2
        await pilot.press("escape")  # back to the list, the marks kept
        await until(pilot, lambda: app.screen is screen, 10, "back on the list")
        assert len(screen.marked) == 2


@pytest.mark.timeout(60)
@pytest.mark.parametrize("nocolor", [False, True], ids=["color", "nocolor"])
@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_snapshot_runs_screen(snap_compare, monkeypatch, tmp_path, size, nocolor):
    if nocolor:
        monkeypatch.setenv("NO_COLOR", "1")
    else:
        monkeypatch.delenv("NO_COLOR", raising=False)
    app = _app(monkeypatch, tmp_path)

    async def shown(pilot) -> None:
        assert pilot.app.no_color is nocolor
        await _runs_shown(pilot)
        await steady(pilot)

    assert snap_compare(app, terminal_size=size, run_before=shown)
