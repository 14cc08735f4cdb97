"""The dashboard's Collectives tab fed the engine's CollectiveProgress events: one row per (rank, group), the laggard's
rows marked with a class and the word BEHIND, and a new event redraws only the rows it changed."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from textual.widgets import TabbedContent

from ddptui.runners import events as ev
from ddptui.tui.app import DdpApp, EventsArrived
from ddptui.tui.replay import ReplaySource
from ddptui.tui.model import RunModel
from ddptui.tui.screens.run import RunScreen
from ddptui.tui.widgets.collectives_view import CollectivesView, CollRow

from tests.support.ui import ScriptSource, aio, settle, until
from tests.support.collectives_scene import T0, behind_batch, collectives_scenario, g

pytestmark = pytest.mark.any_python

SIZE = (160, 40)


def test_model_merges_the_changed_ranks_and_marks_the_rows_to_redraw():
    m = RunModel()
    for b in collectives_scenario():
        m.apply(b)
    assert set(m.collectives) == {0, 1, 2, 3} and m.laggards == ()
    assert m.take_changes().coll == {0, 1, 2, 3}
    m.apply(behind_batch())
    assert m.laggards == (3,) and m.collectives[3]["0"]["enqueued"] == 56 and m.collectives[0]["1"]["enqueued"] == 9
    assert m.take_changes().coll == {0, 1, 2, 3}  # 0-2 changed numbers, 3 turned laggard
    m.apply([ev.CollectiveProgress({1: {"0": g(57, 57)}}, (3,), T0 + 7)])
    assert m.take_changes().coll == {1}


def rows_of(view: CollectivesView) -> dict[tuple[int, str], CollRow]:
    return {w.key: w for w in view.query(CollRow)}


@pytest.mark.timeout(30)
@aio
async def test_collectives_tab_shows_every_rank_and_group_and_the_laggard_then_redraws_only_changed_rows(monkeypatch):
    updates: list = []
    real = CollRow.update
    monkeypatch.setattr(CollRow, "update", lambda self, *a, **kw: (updates.append(self.key), real(self, *a, **kw))[1])
    app = DdpApp(source=ScriptSource(collectives_scenario(), kind="live", hold=True))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        screen = app.screen
        assert isinstance(screen, RunScreen)
        await pilot.press("o")
        assert screen.query_one(TabbedContent).active == "collectives"
        view = screen.query_one(CollectivesView)
        await until(pilot, lambda: len(rows_of(view)) == 6, 10, "the rows")
        rows = rows_of(view)
        assert list(rows) == [(0, "0"), (0, "1"), (1, "0"), (2, "0"), (2, "1"), (3, "0")]
        text = {k: str(w.render()) for k, w in rows.items()}
        assert "node1" in text[(3, "0")] and "default_pg (4 ranks)" in text[(3, "0")]
        assert "evens (2 ranks)" in text[(2, "1")] and " 56 " in text[(1, "0")]
        assert not any(w.has_class("-behind") for w in rows.values())
        assert "no laggard" in str(view.query_one(".coll-head").render())

        updates.clear()
        app.post_message(EventsArrived(app.source, behind_batch()))
        await until(pilot, lambda: rows_of(view)[(3, "0")].has_class("-behind"), 10, "rank 3 marked behind")
        rows = rows_of(view)
        r3 = str(rows[(3, "0")].render())
        assert "BEHIND" in r3 and "others wait in #57" in r3  # a word, not colour alone
        assert [k for k, w in rows.items() if w.has_class("-behind")] == [(3, "0")]
        assert all(rows[(r, "0")].has_class("-waiting") for r in (0, 1, 2))
        assert "#57 all_reduce [1024] Float" in str(rows[(0, "0")].render())
        head = str(view.query_one(".coll-head").render())
        assert "laggard: rank 3" in head and "default_pg (4 ranks): the others wait in #57" in head
        # only the default group's rows changed: the subgroup's rows of ranks 0 and 2 were not redrawn
        assert sorted(set(updates)) == [(0, "0"), (1, "0"), (2, "0"), (3, "0")]

        updates.clear()  # rank 1 completes #57 on its own: its row alone is redrawn
        app.post_message(EventsArrived(app.source, [ev.CollectiveProgress({1: {"0": g(57, 57)}}, (3,), T0 + 7)]))
        await until(pilot, lambda: "ok" in str(rows_of(view)[(1, "0")].render()), 10, "rank 1's row")
        assert set(updates) == {(1, "0")}
        app.source.request_stop()


RECORD = Path(__file__).resolve().parent / "fixtures" / "records" / "slow-collectives"  # make_records.py made it


def first_laggard_at() -> tuple[float, dict]:
    """Seconds from the record's start to its first CollectiveProgress naming a laggard, and that event."""
    events = [json.loads(ln) for ln in (RECORD / "events.jsonl").read_text().splitlines()]
    start = next(e["wall"] for e in events if e["kind"] == "run_started")
    lag = next(e for e in events if e["kind"] == "collectives" and e["laggards"])
    return lag["wall"] - start, lag


@pytest.mark.timeout(30)
@aio
async def test_a_real_records_collectives_replayed_show_the_slow_rank_behind():
    """A real run (the slow profile, rank 1 5 s a step from step 3): replayed up to the first event that names a
    laggard, the Collectives tab shows rank 1 BEHIND and rank 0 waiting in DDP's all_reduce."""
    at, lag = first_laggard_at()
    assert lag["laggards"] == [1]
    app = DdpApp(source=ReplaySource(RECORD, until=at + 0.001))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        await pilot.press("o")
        view = app.screen.query_one(CollectivesView)
        await until(pilot, lambda: len(rows_of(view)) == 2, 10, "both ranks' rows")
        rows = rows_of(view)
        assert rows[(1, "0")].has_class("-behind") and "BEHIND" in str(rows[(1, "0")].render())
        r0 = str(rows[(0, "0")].render())
        assert rows[(0, "0")].has_class("-waiting") and "all_reduce" in r0 and "default_pg (2 ranks)" in r0
        assert "laggard: rank 1" in str(view.query_one(".coll-head").render())
