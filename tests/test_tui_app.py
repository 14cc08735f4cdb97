"""Pilot tests of the dashboard screens, fed from scripted batches of real events (no processes)."""
from __future__ import annotations

import time

import pytest
from textual.widgets import DataTable, Input, TabbedContent
from ddptui.runners import events as ev

from tests.support.scenes import crash_scenario, diverge_scenario, hang_scenario
from ddptui.tui.app import DdpApp
from ddptui.tui.synthetic import SyntheticSource
from ddptui.tui.screens.run import RunScreen
from ddptui.tui.widgets.banner import Banner
from ddptui.tui.widgets.rank_pane import RankPane
from ddptui.tui.widgets.stacks_view import render_stacks
from ddptui.tui.widgets.tail_view import TailView
from tests.support.ui import GatedSource, SIZE, ScriptSource, aio, on_screen, pane_run, screen_text, settle, until

pytestmark = pytest.mark.any_python


@pytest.mark.timeout(30)
@aio
async def test_hang_run_shows_banner_stacks_and_collective_frames():
    app = DdpApp(source=ScriptSource(hang_scenario()))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        screen = app.screen
        assert isinstance(screen, RunScreen)
        banner = screen.query_one(Banner)
        assert banner.display and "STALL: rank 1 is in culprit_wait" in str(banner.render())
        assert screen.query_one(TabbedContent).active == "stacks"  # brought forward once
        assert {p.rank for p in screen.query(RankPane)} == {0, 1}
        text = render_stacks(app.model.stacks, app.model.hang)
        plain = text.plain
        assert "rank 1 (culprit)" in plain and "rank 0 (waiting)" in plain
        hit = [s for s in text.spans if "magenta" in str(s.style)]
        assert any("all_reduce" in plain[s.start:s.end] for s in hit)
        assert not any("culprit_wait" in plain[s.start:s.end] for s in hit)
        await pilot.press("escape")
        assert screen.query_one(TabbedContent).active == "ranks"
        pane = screen.query_one("#rank-1", RankPane)
        assert pane.border_subtitle == "■ killed"  # tui/marks.py: the status reads without colour
        assert app.model.hints and app.model.hints[0].code == "gloo-timeout"


@pytest.mark.timeout(30)
@aio
async def test_crash_panel_and_failed_badges():
    app = DdpApp(source=ScriptSource(crash_scenario()))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        screen = app.screen
        assert screen.query_one(TabbedContent).active == "crash"
        body = str(screen.query_one("#crash-view .crash-text").render())
        assert "Root cause" in body and "injected crash on rank 1" in body and "rank 0: failed after it" in body
        await pilot.press("escape")
        assert screen.query_one("#rank-1", RankPane).border_subtitle == "✗ failed (exit 1)"
        assert screen.query_one("#rank-0", RankPane).has_class("-failed")


@pytest.mark.timeout(30)
@aio
async def test_verdict_table_highlights_first_differing_parameter():
    app = DdpApp(source=ScriptSource(diverge_scenario()))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        screen = app.screen
        assert screen.query_one(TabbedContent).active == "verdict"
        table = screen.query_one("#replica-table", DataTable)
        assert table.row_count == 3 and len(table.columns) == 4
        assert table.cursor_row == 1  # net.0.bias, the first difference
        row = table.get_row_at(1)
        assert row[0].plain.startswith("▶") and row[3].plain == "deadbeef" and "red" in str(row[3].style)
        assert "red" not in str(table.get_row_at(0)[1].style)
        summary = screen.query_one("#summary-table", DataTable)
        assert summary.row_count == 3
        assert "/runs/x-div" in str(screen.query_one("#verdict-view .verdict-head").render())


@pytest.mark.timeout(30)
@aio
async def test_search_filters_panes_and_timeline_toggle_zoom_help():
    app = DdpApp(source=ScriptSource(hang_scenario()))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        screen = app.screen
        await pilot.press("escape")  # back to the grid from the stacks view
        await pilot.press("f")  # the filter (/ searches: tests/test_tui_search_step.py)
        assert screen.query_one("#filter", Input).has_focus
        await pilot.press(*"step 2")  # each key is handled (Input.Changed, the panes redrawn) before press returns
        tail = screen.query_one("#rank-0", TailView)  # the pane is its tail (one widget)
        shown = str(tail.render())
        assert "step 2" in shown and "step 1" not in shown and "step 3" not in shown
        await pilot.press("enter")
        assert isinstance(app.focused, RankPane)
        await pilot.press("t")
        assert screen.query_one(TabbedContent).active == "timeline"
        log = screen.query_one("#timeline-log")
        assert log.line_count == 2 and all("step 2" in log.lines[i] for i in range(2))
        await pilot.press("escape")  # timeline → grid
        await pilot.press("escape")  # clears the filter
        assert screen.needle == "" and screen.query_one(TabbedContent).active == "ranks"
        await pilot.press("1", "z")
        from ddptui.tui.screens.zoom import ZoomScreen
        assert isinstance(app.screen, ZoomScreen) and app.screen.rank == 1
        await pilot.pause()
        assert app.screen.query_one("#zoom-log").line_count == 3
        await pilot.press("escape", "question_mark")
        from ddptui.tui.screens.help import HelpScreen
        assert isinstance(app.screen, HelpScreen)
        assert "dump the stacks" in str(app.screen.query_one("#help-keys").render())
        await pilot.press("escape")
        assert app.screen is screen


@pytest.mark.timeout(30)
@aio
async def test_quit_while_live_asks_then_stops_and_waits_for_run_to_return():
    src = ScriptSource(hang_scenario()[:3], kind="live", hold=True)
    app = DdpApp(source=src)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        await pilot.press("d")
        assert src.dumps == 1 and app.screen.query_one(TabbedContent).active == "stacks"
        await pilot.press("q")
        from ddptui.tui.screens.confirm import ConfirmQuit
        assert isinstance(app.screen, ConfirmQuit)
        await pilot.press("n")
        assert not src.stopped.is_set() and app.running
        await pilot.press("r")  # rerun refused while live
        assert app.runs_started == 1
        await pilot.press("q", "y")
        await until(pilot, lambda: not app.is_running, 10, "the app to leave once the engine's run() returned")
        assert src.stopped.is_set()
    assert app.engine_done.is_set() and app.run_code == 0


def ended_then_closing():
    """A live run's stages: it runs, it ends (its summary event), and its engine closes only when released (stage 2),
    as an engine tidies up (orphans swept, its channel and feed closed) after its summary."""
    batches = crash_scenario()
    return GatedSource([lambda t: batches[0], lambda t: batches[1] + batches[2], lambda t: []])


@pytest.mark.timeout(30)
@aio
async def test_q_once_the_run_has_ended_asks_nothing_and_leaves_when_its_engine_has_closed():
    src = ended_then_closing()
    app = DdpApp(source=src)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.model is not None and app.model.live, 10, "the run to start")
        src.release(1)
        await until(pilot, lambda: app.model.finished is not None, 10, "the run's end to be drawn")
        assert app.running  # the engine is still closing
        await pilot.press("q")
        from ddptui.tui.screens.confirm import ConfirmQuit
        assert not isinstance(app.screen, ConfirmQuit) and app.is_running
        src.release(2)
        await until(pilot, lambda: not app.is_running, 10, "the app to leave once the engine closed")
    assert app.return_code == 0


@pytest.mark.timeout(30)
@aio
async def test_a_quit_question_still_open_when_the_run_ends_goes_and_the_end_stays_on_screen():
    src = ended_then_closing()
    app = DdpApp(source=src)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.model is not None and app.model.live, 10, "the run to start")
        await pilot.press("q")
        from ddptui.tui.screens.confirm import ConfirmQuit
        assert isinstance(app.screen, ConfirmQuit)
        src.release(1)
        src.release(2)
        await until(pilot, lambda: not app.running, 10, "the engine to end")
        await until(pilot, lambda: isinstance(app.screen, RunScreen), 10, "the question to go")
        assert app.is_running and app.model.crash is not None
        assert any("nothing to stop" in n.message for n in app._notifications)
        await pilot.press("q")
        await until(pilot, lambda: not app.is_running, 10, "q to leave the ended run")


@pytest.mark.timeout(30)
@aio
async def test_rerun_after_the_end_starts_a_fresh_model():
    app = DdpApp(source=ScriptSource(crash_scenario(), kind="live"))  # a replay says it cannot rerun instead
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        first = app.model
        await pilot.press("r")
        await settle(pilot, app)
        assert app.runs_started == 2 and app.model is not first and app.model.crash is not None
        assert isinstance(app.screen, RunScreen) and len(app.screen_stack) == 2


class FailingSource(ScriptSource):
    """Emits its batches, then its run() raises, as an engine bug would."""

    def run(self):
        super().run()
        raise RuntimeError("the engine broke")

    def again(self):
        return FailingSource(self.batches, self.kind)


@pytest.mark.timeout(30)
@aio
async def test_an_engine_error_reaches_the_ui_through_the_worker_and_the_app_stays_usable():
    app = DdpApp(source=FailingSource(crash_scenario()[:2], kind="live"))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        assert app.run_code is None and "RuntimeError: the engine broke" in app.run_error
        assert "in run" in app.run_error  # the whole traceback is kept, not only its last line
        assert any(n.title == "engine error" and "the engine broke" in n.message for n in app._notifications)
        assert app.is_running and app.model.ranks[1].lines  # not exited; what came before the error is shown
        first = app.worker
        await pilot.press("r")  # a run that ended in an error can be run again
        await settle(pilot, app)
        assert app.runs_started == 2 and app.worker is not first and "the engine broke" in app.run_error


class ManyBatches:
    """A source that emits one line per batch as fast as it can: far more batches than the UI handles messages."""

    kind = "replay"

    def __init__(self, n: int) -> None:
        self.n, self.emit = n, None

    def prepare(self, emit):
        self.emit = emit

    def run(self):
        t = 1_700_000_000.0
        self.emit([ev.RunStarted("/runs/many", "many", "env", 1, None, t)])
        for i in range(self.n):
            self.emit([ev.LogLines(0, "out", t + i * 1e-3, 0.0, (f"line {i}",))])
        return 0

    def request_stop(self):
        pass

    def request_dump(self):
        return False


@pytest.mark.timeout(60)
@aio
async def test_batches_waiting_in_the_queue_are_merged_in_order_and_none_is_lost():
    handled = []

    class Counting(DdpApp):
        def on_events_arrived(self, msg):  # Textual then calls DdpApp's own handler too (the base class's)
            handled.append(len(msg.batches))

    app = Counting(source=ManyBatches(5000))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app, 40)
        rv = app.model.ranks[0]
        assert rv.seq == 5000 and [t for _, _, t in rv.lines] == [f"line {i}" for i in range(3000, 5000)]
        assert sum(handled) == 5001 and len(handled) < 5001  # some messages stood for several batches
        assert "line 4999" in str(app.screen.query_one("#rank-0", TailView).render())


@pytest.mark.timeout(40)
@aio
async def test_sixteen_ranks_flood_stays_bounded_and_responsive():
    src = SyntheticSource(ranks=16, lines_per_s=1000, seconds=30)
    app = DdpApp(source=src)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: len(app.screen.query(RankPane)) == 16 and app.model.lines_seen > 10_000, 20)
        assert max(len(r.lines) for r in app.model.ranks.values()) <= 2000
        await pilot.press("t")
        assert app.screen.query_one(TabbedContent).active == "timeline"
        await until(pilot, lambda: app.screen.query_one("#timeline-log").line_count > 0, 10)
        src.request_stop()
    app.shutdown(5)
    assert app.engine_done.is_set()


@pytest.mark.timeout(60)
@aio
async def test_a_flood_of_lines_reaches_the_screens_at_most_at_the_redraw_cap(monkeypatch):
    import ddptui.tui.app as app_module
    from ddptui.tui.redraw import VIEW_PERIOD

    posted: list[float] = []
    original = app_module.ModelChanged.__init__

    def stamped(self, changes):
        posted.append(time.monotonic())
        original(self, changes)
    monkeypatch.setattr(app_module.ModelChanged, "__init__", stamped)
    src = SyntheticSource(ranks=16, lines_per_s=1000, seconds=30, period=0.005)  # a batch every 5 ms
    app = DdpApp(source=src)
    async with app.run_test(size=SIZE) as pilot:
        # enough redraws to measure their gaps: a loaded machine draws fewer in the same two seconds of lines
        await until(pilot, lambda: app.model.lines_seen > 30_000 and len(posted) >= 5, 30,
                    "two seconds of the flood and five redraws")
        src.request_stop()
    app.shutdown(5)
    gaps = [b - a for a, b in zip(posted, posted[1:-1])]  # the last one is the run's end: drawn at once
    assert len(gaps) >= 3 and min(gaps) >= VIEW_PERIOD * 0.99, gaps


@pytest.mark.timeout(30)
@aio
async def test_picker_lists_profiles_validates_overrides_and_escape_returns_to_it(tmp_path, monkeypatch):
    from ddptui.runners.launch.profile.load import load_profile
    from ddptui.tui.screens.picker import PickerScreen

    prof = tmp_path / "tiny.yaml"
    prof.write_text("name: tiny\ndescription: a tiny test profile\nnproc: 2\nworkload:\n  builtin: ddp_mlp\nsteps: 5\n")
    started = []
    app = DdpApp(picker_extra=prof)
    monkeypatch.setattr(app, "start_run", lambda p: (started.append(p), app.start_source(ScriptSource(crash_scenario()))))
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: isinstance(app.screen, PickerScreen))
        screen = app.screen
        assert screen.paths[0] == prof
        assert "a tiny test profile" in str(screen.query_one("#profile-desc").render())
        assert "2 × 1 node(s) = 2" in str(screen.query_one("#profile-settings").render())
        await pilot.press("tab", "0")  # nproc=0 is refused by load_profile: its one line shows
        await pilot.pause()
        assert "nproc" in str(screen.query_one("#profile-error").render())
        assert screen.query_one("#launch").disabled
        await pilot.press("backspace", "4", "enter")
        await settle(pilot, app)
        assert started and started[0].nproc == 4 and started[0].name == "tiny"
        assert started[0] == load_profile(prof, ["nproc=4"])
        assert isinstance(app.screen, RunScreen)
        await pilot.press("escape", "escape")  # crash tab → grid → picker (the run has ended)
        assert app.screen is screen


@pytest.mark.timeout(60)
def test_the_dashboard_process_never_imports_torch():
    import subprocess
    import sys
    from pathlib import Path
    root = Path(__file__).resolve().parent.parent
    code = (
        "import asyncio, sys\n"
        "from ddptui.tui.app import DdpApp\n"
        "from ddptui.tui.replay import ReplaySource\n"
        "import ddptui.tui.screens.picker, ddptui.tui.screens.zoom, ddptui.tui.screens.help, ddptui.tui.screens.confirm\n"
        "async def main():\n"
        "    app = DdpApp(source=ReplaySource('tests/fixtures/records/hang'))\n"
        "    async with app.run_test(size=(120, 40)) as pilot:\n"
        "        while app.running:\n"
        "            await pilot.pause(0.01)\n"
        "        await pilot.pause()\n"
        "        assert app.model.hang is not None and app.run_code == 3\n"  # the record of a stalled run
        "asyncio.run(main())\n"
        "print('torch' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=50)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "False"


@pytest.mark.timeout(30)
@aio
async def test_tail_repaints_only_when_its_lines_change():
    from collections import deque

    from textual.app import App

    class One(App):
        def compose(self):
            yield TailView()

    app = One()
    async with app.run_test(size=(60, 8)) as pilot:
        tail = app.query_one(TailView)
        painted = []
        original = tail.refresh
        tail.refresh = lambda *a, **kw: (painted.append(1), original(*a, **kw))[1]
        lines = deque([(1.0, "out", "step 1")], maxlen=3)
        tail.show_lines(lines, 0.0, "", seq=1)
        tail.show_lines(lines, 0.0, "", seq=1)  # the rank's step or loss moved, its lines did not
        assert len(painted) == 1
        lines.append((2.0, "out", "step 2"))
        tail.show_lines(lines, 0.0, "", seq=2)
        tail.show_lines(lines, 0.0, "step 2", seq=2)  # a new filter repaints the same lines
        assert len(painted) == 3
        await pilot.pause()
        assert "step 2" in str(tail.render()) and "step 1" not in str(tail.render())


# -- the newest line of every rank stays on screen (issue 11, item 8) ------------------------------


async def newest_on_screen(pilot, app, ranks: int, n: int) -> list[int]:
    """Ranks whose line n is on screen, once the model has it for every rank and the screens were told."""
    tag = [f"r{r}-line{n:04d}" for r in range(ranks)]
    await until(pilot, lambda: app.drawn and all(
        (rv := app.model.ranks.get(r)) is not None and rv.lines and rv.lines[-1][2].startswith(tag[r])
        for r in range(ranks)), 10, f"line {n} of every rank in the model")
    every = list(range(ranks))

    def shown(text: str) -> list[int]:
        return [r for r in every if tag[r] in text]
    await on_screen(pilot, app, lambda text: shown(text) == every)
    return shown(screen_text(app))


async def shows(pilot, app, text: str) -> bool:
    """Whether text is on screen once the app drew what it was told."""
    await until(pilot, lambda: app.drawn)
    return bool(await on_screen(pilot, app, lambda t: text in t))


@pytest.mark.timeout(40)
@pytest.mark.parametrize("size,ranks", [((160, 48), 2), ((80, 24), 2), ((80, 24), 4), ((80, 24), 16), ((120, 40), 16)])
@aio
async def test_rank_panes_show_the_newest_line_while_running_and_after_the_run_ended(size, ranks):
    src = GatedSource(pane_run(ranks))
    app = DdpApp(source=src)
    everyone = list(range(ranks))
    async with app.run_test(size=size) as pilot:
        assert await newest_on_screen(pilot, app, ranks, 59) == everyone, screen_text(app)
        src.release(1)  # lines keep coming
        assert await newest_on_screen(pilot, app, ranks, 69) == everyone, screen_text(app)
        src.release(2)  # the end: the banner takes rows from the grid, the verdict tab comes forward
        await settle(pilot, app)
        assert app.screen.query_one(TabbedContent).active == "verdict"
        await pilot.press("escape")
        assert await newest_on_screen(pilot, app, ranks, 69) == everyone, screen_text(app)


@pytest.mark.timeout(60)
@aio
async def test_too_many_ranks_for_the_rows_scroll_and_each_pane_still_shows_its_newest_line():
    import re

    from textual.containers import Grid

    def panes_in_view() -> list[int]:
        return sorted(int(r) for r in re.findall(r"─ rank (\d+) ", screen_text(app)))

    src = GatedSource(pane_run(32)[:2])
    app = DdpApp(source=src)
    async with app.run_test(size=(100, 24)) as pilot:  # 6 columns of panes 12 characters wide inside
        await until(pilot, lambda: app.drawn and getattr(app.screen, "compact_on", False), 10, "32 ranks as rows")
        await pilot.press("m")  # the pane grid, asked for
        src.release(1)
        await newest_on_screen(pilot, app, 6, 69)  # the first row of panes
        grid = app.screen.query_one("#rank-grid", Grid)
        assert not app.screen.query_one("#loss").display and grid.max_scroll_y > 0
        first = panes_in_view()
        assert len(first) >= 6 and [r for r in first if f"r{r}-line0069" in screen_text(app)] == first
        grid.scroll_end(animate=False)
        await on_screen(pilot, app, lambda text: "─ rank 31 " in text)
        last = panes_in_view()
        assert 31 in last and [r for r in last if f"r{r}-line0069" in screen_text(app)] == last, screen_text(app)


def test_narrow_tails_drop_the_timestamp_so_the_text_shows():
    from ddptui.tui.widgets.tail_view import stamped

    assert stamped(76) and stamped(33)  # 2 ranks at 160 or 80 columns; 16 ranks at 160 columns (36)
    assert not stamped(32) and not stamped(16)  # 16 ranks at 80 columns: 16 columns, 7 of text behind a stamp


def test_tail_rows_are_cut_for_the_height_it_has_now():
    from collections import deque

    from textual.geometry import Size

    class Sized(TailView):
        """A tail painted at whatever size the test says, as Textual may before the Resize message arrives."""
        now = Size(40, 5)

        @property
        def size(self):
            return self.now

    tail = Sized()
    tail.lines = deque((float(i), "out", f"line {i}") for i in range(20))
    assert [t for _, _, t in tail.rows()] == [f"line {i}" for i in range(15, 20)]
    tail.now = Size(40, 3)  # the banner took two rows: the newest line must still be the last row
    assert [t for _, _, t in tail.rows()] == ["line 17", "line 18", "line 19"]
    tail.now = Size(40, 30)
    assert len(tail.rows()) == 20 and tail.rows()[-1][2] == "line 19"


@pytest.mark.timeout(40)
@pytest.mark.parametrize("size", [(160, 48), (80, 24)])
@aio
async def test_timeline_keeps_the_newest_line_when_the_end_banner_shrinks_it_and_stays_where_the_user_scrolled(size):
    src = GatedSource(pane_run(2))
    app = DdpApp(source=src)
    async with app.run_test(size=size) as pilot:
        assert await newest_on_screen(pilot, app, 2, 59) == [0, 1]
        await pilot.press("t")
        log = app.screen.query_one("#timeline-log")
        await pilot.press("pageup")  # reading history: arriving lines must not pull the view down
        held = log.scroll_y
        src.release(1)
        await until(pilot, lambda: log.line_count >= 140, 10, "the new lines in the timeline")
        assert log.line_count >= 140 and log.scroll_y == held and "r1-line0069" not in screen_text(app)
        await pilot.press("end")  # back to the bottom: following again
        assert await newest_on_screen(pilot, app, 2, 69) == [0, 1]
        src.release(2)  # the end banner takes rows while the timeline is in front
        await settle(pilot, app)
        assert app.screen.query_one(TabbedContent).active == "timeline"
        assert await newest_on_screen(pilot, app, 2, 69) == [0, 1], screen_text(app)


@pytest.mark.timeout(40)
@aio
async def test_timeline_text_is_selected_with_the_mouse_and_the_selection_stays_on_its_lines_as_old_ones_leave(
        monkeypatch):
    """The row-drawn timeline keeps what Textual's Log gave: drag to select, the text comes out as shown; a bounded
    buffer drops its oldest rows as new ones come, and the selection stays on the lines it was made on."""
    from ddptui.tui import model
    from ddptui.tui.widgets.timeline import TimelineView

    monkeypatch.setattr(model, "TIMELINE_LINES", 100)  # 120 lines, then 20 more: the front moves by 40
    src = GatedSource(pane_run(2))
    app = DdpApp(source=src)
    async with app.run_test(size=SIZE) as pilot:
        await newest_on_screen(pilot, app, 2, 59)
        await pilot.press("t")
        log = app.screen.query_one("#timeline-log", TimelineView)
        await pilot.press("pageup")  # reading history: the view holds still
        await pilot.pause()
        top = int(log.scroll_y)
        rows = log.lines[top + 25:top + 28]
        await pilot.mouse_down(log, offset=(4, 25))
        await pilot.hover(log, offset=(30, 27))
        await pilot.mouse_up(log, offset=(30, 27))
        await pilot.pause()
        want = "\n".join([rows[0][4:], rows[1], rows[2][:31]])  # through the cell under the pointer
        assert app.screen.get_selected_text() == want
        assert "r0-line" in want and "rank 0" in want
        await pilot.press("ctrl+c")
        assert app.clipboard == want
        src.release(1)
        await until(pilot, lambda: app.model.timeline_seq >= 140, 10, "20 more lines")
        await pilot.pause()
        assert log.line_count == 100 and log.lines[0] != rows[0]  # older rows left the buffer
        assert app.screen.get_selected_text() == want  # the same lines, not the rows now at those indices


@pytest.mark.timeout(40)
@aio
async def test_zoomed_rank_keeps_its_newest_line_when_the_terminal_gets_smaller():
    src = GatedSource(pane_run(2)[:2])
    app = DdpApp(source=src)
    async with app.run_test(size=(80, 30)) as pilot:
        src.release(1)
        assert await newest_on_screen(pilot, app, 2, 69) == [0, 1]
        await pilot.press("1", "z")
        assert await shows(pilot, app, "r1-line0069"), screen_text(app)
        await pilot.resize_terminal(80, 20)
        assert await shows(pilot, app, "r1-line0069"), screen_text(app)


def _stall_then_progress_again(t: float = 1_700_000_000.0):
    """A live run whose rank 1 stalled (stacks, verdict), then both ranks stepped again and the engine cleared it."""
    b = hang_scenario()[:-1]  # every batch but the teardown
    b.append([ev.StallCleared((1,), t + 20), ev.RankState(1, "running", "progressing again", t + 20),
              ev.RankState(0, "running", "progressing again", t + 20), ev.Progress(1, 4, 0.2, t + 20, "hook"),
              ev.Progress(0, 4, 0.2, t + 20, "hook")])
    return b


@pytest.mark.timeout(30)
@aio
async def test_stall_banner_goes_when_the_ranks_progress_again_and_the_stacks_keep_the_verdict():
    app = DdpApp(source=ScriptSource(_stall_then_progress_again(), kind="live", hold=True))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)  # every batch drawn, the StallCleared one too
        assert app.model.stall is None
        screen = app.screen
        banner = screen.query_one(Banner)
        assert not banner.display or "STALL" not in str(banner.render())
        screen.action_tab("stacks")
        stacks = str(screen.query_one("#stacks-view .stacks-text").render())
        assert "rank 1 is in culprit_wait" in stacks  # the ended stall's verdict, with its stacks
        app.source.request_stop()


async def crash_panel_text(crash: ev.CrashVerdict, world: int) -> str:
    """The crash panel's text once a run that ended with this verdict is drawn."""
    t = crash.wall - 3
    batches = [[ev.RunStarted("/runs/x-crash", "crash", "torchrun", world, 10, t)],
               [crash, ev.RunFinished("failed", 1, "/runs/x-crash/summary.json", t + 3, {})]]
    app = DdpApp(source=ScriptSource(batches))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        return str(app.screen.query_one("#crash-view .crash-text").render())


@pytest.mark.timeout(30)
@aio
async def test_crash_panel_says_what_happened_to_every_other_rank():
    t = 1_700_000_000.0
    crash = ev.CrashVerdict("rank 1 was killed by SIGKILL (out of memory?) at step 5", 1, (2,), "SIGKILL", (), t + 3,
                            together=(3,), stopped=(0,), never_started=(4, 5))
    body = await crash_panel_text(crash, world=6)
    assert "rank 3: failed at the same moment" in body and "rank 2: failed after it" in body
    assert "rank 0: stopped by the launcher" in body and "ranks 4, 5: never started" in body


@pytest.mark.timeout(30)
@aio
async def test_crash_panel_says_each_ranks_end_in_the_engines_words():
    t = 1_700_000_000.0
    crash = ev.CrashVerdict("rank 1 raised RuntimeError: boom", 1, (), "exit 1", (), t + 3, stopped=(0, 2),
                            outcomes={1: "failed first (exit 1)", 0: "torn down by ddptui after rank 1 failed",
                                      2: "stopped by the launcher after rank 1 failed"})
    body = await crash_panel_text(crash, world=3)
    # rank 0 was ended by ddptui's own teardown: never "stopped by the launcher", whatever group it is in
    assert "rank 0: torn down by ddptui after rank 1 failed" in body
    assert "rank 2: stopped by the launcher after rank 1 failed" in body
    assert "rank 0: stopped by the launcher" not in body and "rank 1: " not in body


@pytest.mark.timeout(60)
def test_a_wedged_engine_does_not_keep_the_dashboard_from_exiting():
    """q, y on a run whose engine never returns: the dashboard leaves after JOIN_SECONDS all the same (as the old
    daemon thread did), its process exits, and the wedged thread dies with it."""
    import subprocess
    import sys
    from pathlib import Path
    code = (
        "import asyncio, sys, threading\n"
        "import ddptui.tui.app as A\n"
        "A.JOIN_SECONDS = 0.5\n"
        "class Wedged:\n"
        "    kind = 'live'\n"
        "    def prepare(self, emit): self.emit = emit\n"
        "    def run(self): threading.Event().wait()  # ignores request_stop: an engine bug\n"
        "    def request_stop(self): pass\n"
        "    def request_dump(self): return False\n"
        "async def main():\n"
        "    app = A.DdpApp(source=Wedged())\n"
        "    async with app.run_test(size=(100, 30)) as pilot:\n"
        "        await pilot.press('q', 'y')\n"
        "        while app.is_running:\n"
        "            await pilot.pause(0.05)\n"
        "    print('left with', app.return_code, flush=True)\n"
        "asyncio.run(main())\n"
    )
    root = Path(__file__).resolve().parent.parent
    try:
        out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired as e:
        raise AssertionError(f"the dashboard's process did not exit: {e.stdout!r}") from None
    assert out.returncode == 0 and "left with 1" in out.stdout, out.stderr
