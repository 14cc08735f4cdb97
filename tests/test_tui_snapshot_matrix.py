"""The main screens at 80x24, 160x48 and 220x60, with and without NO_COLOR: SVG snapshots of replayed records, and the
checks that say what each size and NO_COLOR must keep (Launch in view, panes that read, statuses with a marker)."""
from __future__ import annotations

import time

import pytest

import ddptui.tui.screens.picker as picker
from ddptui.tui.app import DdpApp
from ddptui.tui.nocolor import TEXT_CONTRAST, contrast
from tests.support.ui import ScriptSource, aio, pane_run, screen_text, settle, until
from tests.support.replay import PROFILES, replay_app, replayed

SIZES = [(80, 24), (160, 48), (220, 60)]
pytestmark = [pytest.mark.any_python, pytest.mark.usefixtures("utc")]  # tests/conftest.py: the records' zone
SCENES = {  # the screen each record ends on by itself: the running grid, the Stacks tab, the Crash tab, the Verdict
    "run": ("cpu-ddp", 8.90),
    "stall": ("hang", None),
    "crash": ("crash", None),
    "verdict": ("cpu-ddp", None),
}


def _color(nocolor: bool, monkeypatch) -> None:
    """NO_COLOR as a user sets it: in the environment before the app is built (Textual reads it in App.__init__)."""
    if nocolor:
        monkeypatch.setenv("NO_COLOR", "1")
    else:
        monkeypatch.delenv("NO_COLOR", raising=False)


def _checked(nocolor: bool):
    async def run_before(pilot) -> None:
        assert pilot.app.no_color is nocolor  # the snapshot's app really runs with (or without) NO_COLOR
        await replayed(pilot)
    return run_before


@pytest.mark.timeout(60)
@pytest.mark.parametrize("nocolor", [False, True], ids=["color", "nocolor"])
@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("scene", list(SCENES))
def test_snapshot_matrix(snap_compare, monkeypatch, scene, size, nocolor):
    _color(nocolor, monkeypatch)
    record, until_s = SCENES[scene]
    assert snap_compare(replay_app(record, until=until_s), terminal_size=size, run_before=_checked(nocolor))


def _three_profiles(monkeypatch) -> None:
    monkeypatch.setattr(picker, "find_profiles",
                        lambda extra=None: [PROFILES / f"{n}.yaml" for n in ("cpu-ddp", "crash", "hang")])


@pytest.mark.timeout(60)
@pytest.mark.parametrize("nocolor", [False, True], ids=["color", "nocolor"])
def test_snapshot_picker_80x24_with_an_invalid_override(snap_compare, monkeypatch, nocolor):
    _color(nocolor, monkeypatch)
    _three_profiles(monkeypatch)

    async def bad_steps(pilot) -> None:
        assert pilot.app.no_color is nocolor
        await pilot.pause()
        pilot.app.screen.query_one("#ov-steps").value = "many"
        await until(pilot, lambda: "steps" in str(pilot.app.screen.query_one("#profile-error").render()), 10,
                    "the profile's error line")

    assert snap_compare(DdpApp(), terminal_size=(80, 24), run_before=bad_steps)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("nocolor", [False, True], ids=["color", "nocolor"])
@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_snapshot_compact_64_ranks(snap_compare, monkeypatch, size, nocolor):
    """64 ranks (fixed walls, no clock): the compact view, rank 17 failed, 40 behind and 50 slow on top."""
    from tests.support.scenes import many_ranks
    _color(nocolor, monkeypatch)

    async def shown(pilot) -> None:
        assert pilot.app.no_color is nocolor
        await settle(pilot, pilot.app)
        await until(pilot, lambda: pilot.app.screen.compact_on and "✗ 17" in screen_text(pilot.app), 10, "the rows")

    assert snap_compare(DdpApp(source=ScriptSource(many_ranks())), terminal_size=size, run_before=shown)


# -- what each size must keep, as assertions (the snapshots show it; these say it) ------------------------------------

def _inside(app, widget) -> bool:
    return widget.display and app.screen.region.contains_region(widget.region) and widget.region.area > 0


@pytest.mark.timeout(60)
@aio
async def test_picker_at_80x24_shows_launch_the_error_line_and_all_three_fields(monkeypatch):
    from textual.widgets import Button, Input, Static
    _three_profiles(monkeypatch)
    app = DdpApp()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        screen = app.screen
        screen.query_one("#ov-stall_after", Input).value = "soon"
        await until(pilot, lambda: "stall_after" in str(screen.query_one("#profile-error", Static).render()), 10,
                    "the error line")
        await pilot.pause()
        for sel in ("#launch", "#profile-error", "#ov-nproc", "#ov-steps", "#ov-stall_after"):
            w = screen.query_one(sel)
            assert _inside(app, w), (sel, w.region, screen_text(app))
        text = screen_text(app)
        assert "Launch" in text and "stall_after" in text and "nproc" in text
        error = str(screen.query_one("#profile-error", Static).render())
        assert error.splitlines()[0][:30] in text, (error, text)
        assert screen.query_one("#launch", Button).disabled  # an invalid override: nothing to launch


@pytest.mark.timeout(60)
@aio
async def test_help_at_80x24_is_inside_the_screen_and_scrolls_to_its_end(monkeypatch):
    """The run screen's help is longer than 24 rows and was 84 columns wide: cut on the right and at the bottom."""
    _color(False, monkeypatch)
    app = replay_app("cpu-ddp", until=8.90)
    async with app.run_test(size=(80, 24)) as pilot:
        await replayed(pilot)
        await pilot.press("question_mark")
        await until(pilot, lambda: app.screen.query("#help-box"), 10, "the help")
        box = app.screen.query_one("#help-box")
        assert app.screen.region.contains_region(box.region), box.region
        box.scroll_end(animate=False)
        await until(pilot, lambda: "escape closes" in screen_text(app), 10, "the help's last line")


@pytest.mark.timeout(60)
@aio
async def test_run_screen_at_80x24_gives_four_ranks_panes_that_read():
    """4 ranks at 80x24 (two rows of panes): each pane shows at least TAIL_WANT of its newest lines (before, the
    chart kept 9 rows and the panes one line each)."""
    from ddptui.tui.fit import TAIL_WANT
    app = DdpApp(source=ScriptSource([pane_run(4)[0](time.time())], kind="live", hold=True))
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, app)
        await pilot.pause()
        text = screen_text(app)
        for r in range(4):
            shown = [n for n in range(60) if f"r{r}-line{n:04d}" in text]
            assert len(shown) >= TAIL_WANT and shown[-1] == 59, (r, shown, text)
        app.source.request_stop()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("size,columns", [((160, 48), 2), ((220, 60), 3)], ids=["160x48", "220x60"])
@aio
async def test_a_wide_terminal_puts_three_ranks_in_one_row(size, columns):
    from textual.containers import Grid
    from ddptui.tui.widgets.rank_pane import RankPane
    app = DdpApp(source=ScriptSource([pane_run(3)[0](time.time())], kind="live", hold=True))
    async with app.run_test(size=size) as pilot:
        await settle(pilot, app)
        await until(pilot, lambda: len(app.screen.query(RankPane)) == 3, 10, "three panes")
        await pilot.pause()
        assert app.screen.query_one("#rank-grid", Grid).styles.grid_size_columns == columns
        tops = {p.region.y for p in app.screen.query(RankPane)}
        assert len(tops) == (1 if columns == 3 else 2), tops
        app.source.request_stop()


def _segments(app, needle: str) -> list:
    """(row, segment) of every drawn segment whose text contains needle, with the colours the terminal gets."""
    return [(y, seg) for y, strip in enumerate(app.screen._compositor.render_strips())
            for seg in strip if needle in seg.text]


def _grey(c) -> int:
    return c.get_truecolor().red  # under NO_COLOR every colour is a grey


@pytest.mark.timeout(60)
@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
@aio
async def test_nocolor_statuses_have_a_marker_and_read_on_their_background(size, monkeypatch):
    """NO_COLOR on a crashed run: the header's status, the failed rank's badge, the crash's root cause and the
    traceback read at WCAG AA (Textual's plain greys gave red 1.6:1 on the dark theme) and the statuses say ✗."""
    from textual.widgets import TabbedContent
    _color(True, monkeypatch)
    app = replay_app("crash")
    assert app.no_color
    async with app.run_test(size=size) as pilot:
        await replayed(pilot)
        head = str(app.screen.query_one("#run-head").render())
        assert "✗ failed" in head, head

        def readable(needle: str) -> None:
            found = _segments(app, needle)
            assert found, (needle, screen_text(app))
            for y, seg in found:
                st = seg.style
                ratio = contrast(_grey(st.color), _grey(st.bgcolor))
                assert ratio >= TEXT_CONTRAST, (needle, y, seg, ratio)
        readable("✗ failed")  # the header's word (reverse: its grey is the background)
        assert app.screen.query_one(TabbedContent).active == "crash"
        app.screen.query_one("#crash-view").scroll_end(animate=False)  # 80x24: the excerpt's end is below
        await until(pilot, lambda: _segments(app, "RuntimeError: injected crash on rank 1 at step 8"), 10,
                    "the traceback's last line in view")
        readable("RuntimeError: injected crash on rank 1 at step 8")  # the traceback's last line, red in colour
        await pilot.press("escape")
        await until(pilot, lambda: "✗ failed (exit 1)" in screen_text(app), 10, "rank 1's badge on the grid")
        readable("✗ failed (exit 1)")


@pytest.mark.timeout(60)
@aio
async def test_with_colour_the_statuses_keep_their_colours_and_gain_the_marker(monkeypatch):
    _color(False, monkeypatch)
    app = replay_app("crash")
    assert not app.no_color
    async with app.run_test(size=(160, 48)) as pilot:
        await replayed(pilot)
        (y, seg), *_ = _segments(app, "✗ failed")
        c = seg.style.color.get_truecolor()
        assert c.red > c.green + 60 and c.red > c.blue + 60, c  # still red: NO_COLOR alone changes the colours
