"""`/` search (highlight, n/N, regex, scopes, a bad regex said in its box) and replay stepping (x [ ] , . j) on the
dashboard, driven by keys over committed records of real runs; the search bar's snapshots at 80x24 and 160x48."""
from __future__ import annotations

import pytest
from textual.widgets import Input

from ddptui.runners.edge.record import replay_events
from ddptui.tui import stepping
from ddptui.tui.widgets.banner import Banner
from ddptui.tui.widgets.rank_pane import RankPane
from ddptui.tui.widgets.tail_view import CURRENT, MATCH
from ddptui.tui.widgets.timeline import TimelineView
from tests.support.replay import RECORDS, replay_app, replayed
from tests.support.ui import aio, steady, until

pytestmark = [pytest.mark.any_python, pytest.mark.usefixtures("utc")]  # tests/conftest.py: the records' zone
SIZE = (160, 48)


def marked(widget, rows: int) -> list[str]:
    """The texts a widget draws highlighted as search matches, in its first `rows` rows."""
    return [seg.text for y in range(rows) for seg in widget.render_line(y)
            if seg.style is not None and seg.style.bgcolor in (MATCH.bgcolor, CURRENT.bgcolor)]


def pane(app, rank: int) -> RankPane:
    return app.screen.query_one(f"#rank-{rank}", RankPane)


@pytest.mark.timeout(60)
@aio
async def test_search_highlights_steps_through_matches_scopes_and_says_a_bad_regex():
    app = replay_app("cpu-ddp")
    async with app.run_test(size=SIZE) as pilot:
        await replayed(pilot)
        screen = app.screen
        box = screen.query_one("#search", Input)
        await pilot.press("escape")  # the grid, from the Verdict tab the finished replay shows
        await pilot.press("slash", *"LOSS 0.0")
        assert box.has_focus and screen.search is not None
        for r in (0, 1):  # every pane marks the matches among its newest lines, case-insensitively
            found = marked(pane(app, r), pane(app, r).size.height)
            assert found and set(found) == {"loss 0.0"}, (r, found)

        await pilot.press("enter")  # the first match, in the timeline
        view = screen.query_one(TimelineView)
        assert screen.query_one("#tabs").active == "timeline" and view.has_focus
        found = view.search_matches()
        n = len(found)
        assert n > 4 and box.border_subtitle == f"match 1/{n}"
        await until(pilot, lambda: view.scrolled, 10, "the first match scrolled into view")

        def current_row() -> int:
            assert view.current is not None
            i = view.current[0] - view._front_now()
            assert view.scroll_y <= i < view.scroll_y + view.size.height  # scrolled into view
            return i
        first = current_row()
        assert "loss 0.0" in view.lines[first] and marked(view, view.size.height)
        await pilot.press("n")
        assert box.border_subtitle == f"match 2/{n}" and current_row() > first
        await pilot.press("N", "N")  # back to the first, then round to the last
        assert box.border_subtitle == f"match {n}/{n}" and view.current == found[-1][:2]
        current_row()

        await pilot.press("slash")  # the box again: a regex on rank 1's lines only
        box.value = "re:loss 0\\.0[0-4] rank:1"
        await pilot.press("enter")
        scoped = view.search_matches()
        assert scoped and box.border_subtitle == f"match 1/{len(scoped)}" and len(scoped) < n
        assert {view._rows[r - view._front_now()][1] for r, _, _ in scoped} == {1}
        await pilot.press("t")  # back to the grid: only rank 1's pane marks its matches
        assert not marked(pane(app, 0), pane(app, 0).size.height) and marked(pane(app, 1), pane(app, 1).size.height)

        await pilot.press("slash")
        box.value = "stream:err re:."
        await pilot.press("enter")
        errs = view.search_matches()
        assert errs and {view._rows[r - view._front_now()][2] for r, _, _ in errs} == {"err"}

        await pilot.press("slash")
        box.value = "re:loss (0"  # a bad regex: said in the box in one line, nothing marked, the box keeps the focus
        await pilot.pause()
        assert box.border_subtitle == "bad regular expression: missing ), unterminated subpattern at position 5"
        assert box.has_class("-bad-query") and screen.search is None and not marked(view, view.size.height)
        await pilot.press("enter")
        assert box.has_focus and app.is_running
        await pilot.press("escape")  # closes the search
        assert not box.has_class("-open") and screen.search is None
        await pilot.press("n")  # no search: n says so and moves nothing
        assert box.border_subtitle == ""

        await pilot.press("f", *"step 60 ")  # the filter stays, on f
        assert screen.needle == "step 60 " and screen.query_one("#filter", Input).has_focus
        tail = str(pane(app, 1).render())
        assert "step 60 " in tail and "step 120" not in tail


@pytest.mark.timeout(60)
@aio
async def test_stepping_to_the_stall_and_back_through_a_record():
    events = list(replay_events(RECORDS / "hang", []))
    stall = stepping.incidents(events)[0].index
    app = replay_app("hang")
    async with app.run_test(size=SIZE) as pilot:
        await replayed(pilot)
        screen = app.screen
        banner = screen.query_one(Banner)
        head = screen.query_one("#run-head")
        assert app.model.finished is not None  # the replay opens at its end

        await pilot.press("x")  # the first stall
        assert banner.state[1].startswith("STALL: rank 0,1: no step or output") and banner.display
        assert f"event {stall + 1}/{len(events)}" in str(head.render())
        assert app.model.finished is None and app.model.stall is not None  # the run as it was then

        await pilot.press("left_square_bracket")  # one event before it: no stall yet
        assert banner.state == ("", "") and not banner.display
        assert f"event {stall}/{len(events)}" in str(head.render())
        await pilot.press("right_square_bracket")
        assert banner.state[1].startswith("STALL")

        await pilot.press("j", *"+3")  # three seconds in: rank 1 has not yet said it hangs
        await pilot.press("enter")
        c = screen.cursor
        pos = c.pos
        assert c.walls[pos] <= c.start + 3 < c.walls[pos + 1]  # the last event at +3 s
        assert f"at +{c.walls[pos] - c.start:.1f}s · event {pos + 1}/" in str(head.render()) and not banner.display
        assert "injecting hang" not in str(pane(app, 1).render())
        await pilot.press("full_stop")
        assert screen.cursor.pos > pos and screen.cursor.walls[screen.cursor.pos] <= screen.cursor.walls[pos] + 1
        await pilot.press("comma")
        assert screen.cursor.pos < pos + 1

        await pilot.press("j", *"+9")
        await pilot.press("enter")
        assert "injecting hang" in str(pane(app, 1).render())  # folded on to 9 s: its line is there
        await pilot.press("t")  # the timeline as it was then too
        assert screen.query_one(TimelineView).line_count == len(app.model.timeline) == 3
        await pilot.press("t")

        await pilot.press("j", *"25:99")  # a time that is none: said in the box, which stays open
        await pilot.press("enter")
        jump = screen.query_one("#jump", Input)
        assert "HH:MM:SS" in jump.border_subtitle and jump.has_focus
        await pilot.press("escape")
        assert not jump.display

        await pilot.press("X")  # the only incident, from either side
        assert screen.cursor.pos == stall and banner.state[1].startswith("STALL")


@pytest.mark.timeout(60)
@aio
async def test_a_match_in_a_tab_not_yet_laid_out_is_scrolled_to_the_middle_once_it_has_its_height():
    """n from another tab shows the timeline and scrolls to the match before that tab has been laid out (its height
    still 0): the match must still land mid-view, not at the view's top (a flake seen once on a loaded machine)."""
    app = replay_app("cpu-ddp")
    async with app.run_test(size=(160, 48)) as pilot:
        await replayed(pilot)
        screen, view = app.screen, app.screen.query_one(TimelineView)
        row = len(app.model.timeline) // 2
        screen.action_tab("timeline")
        assert view.size.height == 0  # shown, but not laid out until the next refresh
        view.go_to_when_laid_out((row, 0, 4))
        await until(pilot, lambda: view.scrolled and view.size.height > 0, 10, "the match scrolled to")
        await steady(pilot)
        assert view.scroll_y == row - view.size.height // 2 > 0


@pytest.mark.timeout(60)
@pytest.mark.parametrize("nocolor", [False, True], ids=["color", "nocolor"])
@pytest.mark.parametrize("size", [(80, 24), (160, 48)], ids=lambda s: f"{s[0]}x{s[1]}")
def test_snapshot_search_bar(snap_compare, monkeypatch, size, nocolor):
    """The search box open on a finished run, its matches marked in the timeline, the first one current."""
    if nocolor:
        monkeypatch.setenv("NO_COLOR", "1")
    else:
        monkeypatch.delenv("NO_COLOR", raising=False)

    async def searched(pilot) -> None:
        assert pilot.app.no_color is nocolor
        await replayed(pilot)
        await pilot.press("escape", "slash")
        box = pilot.app.screen.query_one("#search", Input)
        box.cursor_blink = False
        box.value = "re:loss 0\\.0\\d"
        await pilot.press("enter")  # the timeline, at the first match (no chart: its thinning follows its width)
        view = pilot.app.screen.query_one(TimelineView)
        await until(pilot, lambda: pilot.app.drawn and box.border_subtitle.startswith("match 1/") and view.scrolled,
                    10, "the match scrolled into view")
        await steady(pilot)

    assert snap_compare(replay_app("cpu-ddp"), terminal_size=size, run_before=searched)
