"""The command palette offers the screen's ddptui actions; Ctrl-C and the palette's Quit ask as q does (pilot tests)."""
from __future__ import annotations

import pytest
from textual.command import CommandPalette

from ddptui.tui.app import DdpApp
from ddptui.tui.palette import screen_commands
from ddptui.tui.screens.confirm import ConfirmQuit
from ddptui.tui.screens.run import REPLAY_UNLISTED, RunScreen
from tests.support.scenes import crash_scenario, hang_scenario
from tests.support.ui import SIZE, ScriptSource, aio, settle, until

pytestmark = pytest.mark.any_python


async def palette_pick(pilot, app, words: str, name: str) -> None:
    """ctrl+p, type `words`, run the command called `name` once the palette lists it."""
    await pilot.press("ctrl+p")
    await until(pilot, lambda: isinstance(app.screen, CommandPalette), 5, "the palette to open")
    await pilot.press(*words)

    def index() -> int | None:
        names = [str(o.prompt).split("\n")[0].strip() for o in app.screen.query_one("CommandList").options]
        return names.index(name) if name in names else None
    await until(pilot, lambda: index() is not None, 5, f"the palette to list {name!r}")
    await pilot.pause(0.2)  # every provider answered: the list holds still
    app.screen.query_one("CommandList").highlighted = index()
    await pilot.press("enter")


@pytest.mark.timeout(30)
@aio
async def test_palette_lists_every_described_key_of_a_live_run_and_runs_it():
    src = ScriptSource(hang_scenario()[:3], kind="live", hold=True)
    app = DdpApp(source=src)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        commands = {c.name: c.keys for c in screen_commands(app.screen)}
        for b in RunScreen.BINDINGS:  # every key the run screen describes, the ones added later too
            assert b.description in commands, b
        assert set(commands["quit"].split()) == {"q", "ctrl+c", "^q"} and commands["dump stacks"] == "d" and commands["screenshot"] == "p"
        assert "Focus Next" not in commands and "Copy selected text" not in commands  # Textual's stay Textual's
        await palette_pick(pilot, app, "dump stacks", "dump stacks")
        await until(pilot, lambda: src.dumps == 1, 5, "the palette's dump to reach the engine")
        await palette_pick(pilot, app, "timeline", "timeline")
        await until(pilot, lambda: app.screen.query_one("#tabs").active == "timeline", 5, "the timeline tab")
        src.request_stop()


@pytest.mark.timeout(30)
@aio
async def test_a_replay_palette_leaves_out_what_needs_a_live_run():
    app = DdpApp(source=ScriptSource(crash_scenario()))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        actions = {c.name for c in screen_commands(app.screen)}
        assert "timeline" in actions and "go to rank" in actions
        assert not actions & {b.description for b in RunScreen.BINDINGS if b.action in REPLAY_UNLISTED}


@pytest.mark.timeout(30)
@aio
async def test_ctrl_c_and_the_palettes_quit_ask_before_stopping_a_live_run():
    src = ScriptSource(hang_scenario()[:3], kind="live", hold=True)
    app = DdpApp(source=src)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        await pilot.press("ctrl+c")
        assert isinstance(app.screen, ConfirmQuit)
        await pilot.press("n")
        assert app.running and not src.stopped.is_set()
        await palette_pick(pilot, app, "quit", "Quit")  # Textual's own Quit (ddptui's q is "quit")
        await until(pilot, lambda: isinstance(app.screen, ConfirmQuit), 5, "the palette's Quit to ask")
        assert app.running and not src.stopped.is_set()
        await pilot.press("y")
        await until(pilot, lambda: not app.is_running, 10, "the app to leave once the run stopped")
    assert src.stopped.is_set()


@pytest.mark.timeout(30)
@aio
async def test_ctrl_c_on_the_picker_quits_as_q_does():
    from ddptui.tui.screens.picker import PickerScreen
    app = DdpApp()
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: isinstance(app.screen, PickerScreen), 5, "the picker")
        names = {c.name for c in screen_commands(app.screen)}
        assert {"launch", "quit", "help"} <= names
        await pilot.press("ctrl+c")
        await until(pilot, lambda: not app.is_running, 5, "ctrl+c to leave the picker")
