"""The Compare screen's snapshots at 80x24 and 160x48, with and without NO_COLOR, on two committed run records."""
from __future__ import annotations

import pytest

from ddptui.tui.screens.compare import CompareApp, CompareScreen
from tests.support.replay import RECORDS
from tests.support.ui import steady, until

pytestmark = [pytest.mark.any_python, pytest.mark.usefixtures("utc")]  # tests/conftest.py: the records' zone


def _checked(nocolor: bool):
    async def run_before(pilot) -> None:
        app = pilot.app
        assert app.no_color is nocolor
        await until(pilot, lambda: isinstance(app.screen, CompareScreen) and app.screen.loaded, 30, "the records")
        assert not app.screen.error
        await steady(pilot)
    return run_before


@pytest.mark.timeout(60)
@pytest.mark.parametrize("nocolor", [False, True], ids=["color", "nocolor"])
@pytest.mark.parametrize("size", [(80, 24), (160, 48)], ids=lambda s: f"{s[0]}x{s[1]}")
def test_snapshot_compare(snap_compare, monkeypatch, size, nocolor):
    if nocolor:
        monkeypatch.setenv("NO_COLOR", "1")
    else:
        monkeypatch.delenv("NO_COLOR", raising=False)
    app = CompareApp([RECORDS / "cpu-ddp", RECORDS / "slow-collectives"])
    assert snap_compare(app, terminal_size=size, run_before=_checked(nocolor))
