"""`ddptui attach RUN_DIR` in the dashboard: a record another engine writes, followed as it grows (tui/follow.py),
its ranks and its verdict shown, d and s sent to that engine through its control channel, q leaving the run be."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from ddptui.runners.edge import control
from ddptui.tui.app import DdpApp
from ddptui.tui.follow import FollowSource
from ddptui.tui.widgets.banner import Banner
from tests.support.ui import aio, screen_text, until

pytestmark = pytest.mark.any_python

RECORDS = Path(__file__).resolve().parent / "fixtures" / "records"


@pytest.mark.timeout(60)
@aio
async def test_the_dashboard_follows_a_live_record_and_asks_its_engine(tmp_path):
    run = tmp_path / "hang"
    shutil.copytree(RECORDS / "hang", run)
    lines = (run / "events.jsonl").read_text().splitlines(keepends=True)
    verdict_at = next(i for i, ln in enumerate(lines) if '"kind": "hang_verdict"' in ln)
    (run / "events.jsonl").write_text("".join(lines[:verdict_at]))  # the engine has not judged yet
    (run / "summary.json").unlink()
    dumps, stops = [], []
    engine = control.Channel(run, lambda: dumps.append(1), stops.append).open()  # the test plays the engine
    try:
        app = DdpApp(source=FollowSource(run, poll=0.05))
        async with app.run_test(size=(160, 44)) as pilot:
            await until(pilot, lambda: app.model is not None and sorted(app.model.ranks) == [0, 1], 20,
                        "both ranks to be shown")
            assert app.running and app.model.hang is None
            text = screen_text(app)
            assert "rank 0" in text and "rank 1" in text
            await pilot.press("d")
            await until(pilot, lambda: dumps == [1], 10, "the dump to reach the engine")
            await pilot.press("s")
            await until(pilot, lambda: stops == ["asked through its control channel"], 10, "the stop to reach it")
            with open(run / "events.jsonl", "a") as f:  # the engine goes on: the verdict and the end
                f.write("".join(lines[verdict_at:]))
            shutil.copy(RECORDS / "hang" / "summary.json", run / "summary.json")
            engine.close()
            await until(pilot, lambda: not app.running and app.drawn, 20, "the run's end to be drawn")
            assert app.model.hang is not None and app.run_code == 3
            banner = str(app.screen.query_one(Banner).render())
            assert app.model.hang.text.startswith("collective #16") and "collective #16" in banner, banner
            await pilot.press("q")  # the run is over: q leaves at once
    finally:
        engine.close()


@pytest.mark.timeout(60)
@aio
async def test_a_viewer_whose_engine_died_shows_what_is_there_as_incomplete(tmp_path):
    run = tmp_path / "hang"
    shutil.copytree(RECORDS / "hang", run)
    lines = (run / "events.jsonl").read_text().splitlines(keepends=True)
    (run / "events.jsonl").write_text("".join(lines[:20]))
    (run / "summary.json").unlink()
    (run / "engine.json").write_text('{"pid": 4242}')
    app = DdpApp(source=FollowSource(run, poll=0.05))
    async with app.run_test(size=(160, 44)) as pilot:
        await until(pilot, lambda: not app.running and app.drawn, 20, "the record to be shown")
        assert app.model.finished is not None and app.model.finished.status == "incomplete"
        assert app.run_code == 1 and sorted(app.model.ranks) == [0, 1]
        assert "the engine (pid 4242) died: the record is incomplete" in app.source.died
