"""`ddptui serve`'s own rules (token, exposure warning, bad input) and a browser tab's viewer of a record or of a runs
folder (pilot, no processes)."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from ddptui.tui.cli import main
from ddptui.tui.open_record import source_for
from ddptui.tui.replay import ReplaySource
from ddptui.tui.screens.confirm import ConfirmQuit
from ddptui.tui.screens.picker import PickerScreen
from ddptui.tui.screens.runs import RunsScreen
from ddptui.tui.serve import exposure_warning, tab_command, token_ok
from ddptui.tui.viewer import ViewerApp
from ddptui.tui.widgets.banner import Banner
from tests.support.replay import replayed, runs_folder
from tests.support.scenes import hang_scenario
from tests.support.ui import SIZE, ScriptSource, aio, settle, until

pytestmark = pytest.mark.any_python
RECORDS = Path(__file__).parent / "fixtures" / "records"


def test_only_paths_under_the_token_pass():
    assert token_ok("/abc123/", "abc123") and token_ok("/abc123/ws", "abc123")
    assert token_ok("/abc123/static/js/textual.js", "abc123")
    for path in ("/", "/ws", "/abc12/", "/abc1234/", "/static/abc123/", "abc123/", "/abc123"):
        assert not token_ok(path, "abc123"), path


def test_a_host_beyond_loopback_is_warned_about():
    for host in ("127.0.0.1", "localhost", "::1", "127.0.0.2"):
        assert exposure_warning(host) is None, host
    for host in ("0.0.0.0", "::", "192.168.1.5", "myhost.example"):
        line = exposure_warning(host)
        assert line is not None and host in line and "stop" in line and "\n" not in line


def test_each_tab_runs_the_viewer_of_the_record(tmp_path):
    cmd = tab_command(tmp_path / "run x")
    assert cmd.startswith("exec ") and "-m ddptui.tui.viewer" in cmd and f"'{tmp_path / 'run x'}'" in cmd


def test_serve_refuses_what_is_no_record_in_one_line(tmp_path, capsys):
    assert main(["serve", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not a ddptui run record" in err and "Traceback" not in err
    record = tmp_path / "rec"
    shutil.copytree(RECORDS / "cpu-ddp", record)
    assert main(["serve", str(record), "--port", "70000"]) == 2
    assert "--port 70000" in capsys.readouterr().err


def test_a_finished_record_is_replayed_by_the_tab(tmp_path):
    record = tmp_path / "rec"
    shutil.copytree(RECORDS / "crash", record)
    assert isinstance(source_for(record)[0], ReplaySource)
    assert source_for(tmp_path)[0] is None and "not a ddptui run record" in source_for(tmp_path)[1]


class FollowedRun(ScriptSource):
    """A record another process's engine writes, as the tab sees it: s reaches that engine only through stop_run."""

    def __init__(self) -> None:
        super().__init__(hang_scenario()[:3], kind="follow", hold=True)
        self.stops_asked = 0

    def stop_run(self) -> str:
        self.stops_asked += 1
        return "asked the engine to stop every rank…"


@pytest.mark.timeout(30)
@aio
async def test_a_tab_stops_a_live_run_only_after_s_and_yes_and_q_leaves_it_running():
    src = FollowedRun()
    app = ViewerApp(source=src)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        await pilot.press("s")
        assert isinstance(app.screen, ConfirmQuit) and src.stops_asked == 0
        await pilot.press("n")
        assert src.stops_asked == 0 and app.running
        await pilot.press("s", "y")
        await until(pilot, lambda: src.stops_asked == 1, 5, "the yes to ask the engine")
        await pilot.press("q")  # leaves the record; the run is its engine's
        await until(pilot, lambda: not app.is_running, 10, "q to leave")
    assert src.stops_asked == 1


def test_serve_runs_dir_refuses_a_missing_folder_and_a_record_and_a_folder_together_in_one_line(tmp_path, capsys):
    assert main(["serve", "--runs-dir", str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--runs-dir" in err and "nope" in err and "Traceback" not in err
    for argv in (["serve"], ["serve", str(tmp_path), "--runs-dir", str(tmp_path)]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "RUN_DIR" in err and "--runs-dir" in err
    cmd = tab_command(runs_dir=tmp_path / "my runs")
    assert cmd.startswith("exec ") and "-m ddptui.tui.viewer --runs-dir" in cmd and f"'{tmp_path / 'my runs'}'" in cmd


@pytest.mark.timeout(60)
@aio
async def test_a_runs_dir_tab_lists_the_records_opens_one_and_q_goes_back_to_the_list(tmp_path):
    runs = runs_folder(tmp_path)
    app = ViewerApp(runs_dir=runs)
    async with app.run_test(size=(160, 48)) as pilot:
        await until(pilot, lambda: isinstance(app.screen, RunsScreen) and app.screen.loaded, 20, "the runs")
        assert len(app.screen.rows) == 5 and app.source is None
        assert not any(isinstance(s, PickerScreen) for s in app.screen_stack)  # nothing to launch
        await pilot.press("escape")  # the list is all there is: escape does not leave it for a blank screen
        assert isinstance(app.screen, RunsScreen) and app.is_running
        await pilot.press("down", "down", "enter")  # the crash, replayed
        await until(pilot, lambda: app.source is not None and app.source.kind == "replay", 10, "the replay")
        assert Path(app.source.run_dir).name == "crash"
        await replayed(pilot)
        assert "rank 1 failed first" in str(app.screen.query_one(Banner).render())
        await pilot.press("q")  # back to the list, not out of the tab
        await until(pilot, lambda: isinstance(app.screen, RunsScreen) and app.screen.loaded, 20, "the list again")
        assert app.is_running and app.runs_started == 1
        await pilot.press("enter")  # the newest, cpu-ddp: the run screen is reused for the next record
        await until(pilot, lambda: app.runs_started == 2 and app.source.kind == "replay", 10, "the second replay")
        assert Path(app.source.run_dir).name == "cpu-ddp"
        await replayed(pilot)
        await pilot.press("q")
        await until(pilot, lambda: isinstance(app.screen, RunsScreen) and app.screen.loaded, 20, "the list again")
        await pilot.press("q")  # from the list: the tab's viewer leaves
        await until(pilot, lambda: not app.is_running, 10, "q to leave")


@pytest.mark.timeout(30)
@aio
async def test_q_on_a_followed_record_of_a_runs_dir_tab_leaves_the_run_going_and_shows_the_list(tmp_path):
    src = FollowedRun()
    app = ViewerApp(runs_dir=tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: isinstance(app.screen, RunsScreen) and app.screen.loaded, 20, "the (empty) runs")
        app.pop_screen()
        app.start_source(src)  # as enter on a live record does (open_record: a FollowSource)
        await settle(pilot, app)
        assert app.running
        await pilot.press("q")  # leaves the record: this tab stops following, the run is its engine's
        await until(pilot, lambda: isinstance(app.screen, RunsScreen), 10, "the list after leaving")
        assert not app.running and src.stops_asked == 0 and app.is_running
