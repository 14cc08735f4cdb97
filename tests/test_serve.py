"""`ddptui serve`'s own rules (token, exposure warning, bad input) and a browser tab's viewer (pilot, no processes)."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from ddptui.tui.cli import main
from ddptui.tui.replay import ReplaySource
from ddptui.tui.screens.confirm import ConfirmQuit
from ddptui.tui.serve import exposure_warning, tab_command, token_ok
from ddptui.tui.viewer import ViewerApp, source_for
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
    assert isinstance(source_for(record), ReplaySource)
    assert "not a ddptui run record" in str(source_for(tmp_path))


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
