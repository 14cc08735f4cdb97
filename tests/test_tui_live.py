"""The dashboard driving REAL runs (torchrun, gloo, CPU) through Pilot: clean, hang, crash, quit mid-run."""
from __future__ import annotations

from pathlib import Path

import psutil
import pytest
from textual.widgets import DataTable, TabbedContent

from ddptui.runners.launch.profile.load import load_profile
from tests.support.ui import SIZE, aio, until
from ddptui.tui.app import DdpApp, LiveSource
from ddptui.tui.widgets.banner import Banner
from ddptui.tui.widgets.rank_pane import RankPane

pytestmark = pytest.mark.main_suite(
    "long end-to-end rank runs (the engine and dashboard under them are in the any_python set)")

ROOT = Path(__file__).resolve().parent.parent


def live_app(name: str, runs_dir: Path, *overrides: str) -> DdpApp:
    return DdpApp(source=LiveSource(load_profile(ROOT / "profiles" / f"{name}.yaml", overrides), runs_dir))


async def until_done(pilot, app, limit: float) -> None:
    """The run ended, the UI heard it (Worker.StateChanged) and drew everything it was told."""
    await until(pilot, lambda: not app.running and app.drawn, limit, "the run to finish and be drawn")


@pytest.mark.timeout(120)
@aio
async def test_clean_cpu_ddp_run_reaches_the_verdict(runs_dir):
    app = live_app("cpu-ddp", runs_dir)
    async with app.run_test(size=SIZE) as pilot:
        await until_done(pilot, app, 100)
        screen = app.screen
        assert app.run_code == 0 and app.run_error is None
        assert screen.query_one(TabbedContent).active == "verdict"
        banner = str(screen.query_one(Banner).render())
        assert "run ok" in banner and "identical" in banner
        assert app.model.replica.status == "identical"
        summary = screen.query_one("#summary-table", DataTable)
        assert summary.row_count == 2
        assert [summary.get_row_at(i)[1] for i in range(2)] == ["✓ exited ok", "✓ exited ok"]
        assert screen.query_one("#replica-table", DataTable).row_count == len(app.model.replica.params) > 0
        assert all(rv.step == 50 for rv in app.model.ranks.values())
        assert str(runs_dir) in app.model.run_dir
        await pilot.press("escape")
        panes = list(screen.query(RankPane))
        assert [p.border_subtitle for p in panes] == ["✓ exited ok", "✓ exited ok"]


@pytest.mark.timeout(120)
@aio
async def test_hang_run_shows_stall_banner_and_stacks(runs_dir):
    app = live_app("hang", runs_dir)
    async with app.run_test(size=SIZE) as pilot:
        await until_done(pilot, app, 100)
        screen = app.screen
        m = app.model
        assert m.stall is not None and m.hang is not None and m.hang.culprits == (1,)
        banner = screen.query_one(Banner)
        assert banner.has_class("-stall") and "STALL: rank 1" in str(banner.render())
        assert screen.query_one(TabbedContent).active == "stacks"
        text = str(screen.query_one("#stacks-view .stacks-text").render())
        assert "rank 1 (culprit)" in text and "rank 0 (waiting)" in text and "thread MainThread" in text
        from ddptui.tui.widgets.stacks_view import render_stacks
        rich = render_stacks(m.stacks, m.hang)
        marked = [rich.plain[s.start:s.end] for s in rich.spans if str(s.style) == "bold magenta"]
        assert "  ▶ " in marked  # rank 0's frame in the collective is highlighted


@pytest.mark.timeout(120)
@aio
async def test_crash_run_names_the_root_cause(runs_dir):
    app = live_app("crash", runs_dir)
    async with app.run_test(size=SIZE) as pilot:
        await until_done(pilot, app, 100)
        screen = app.screen
        assert app.run_code == 1 and app.model.crash.root_rank == 1
        assert screen.query_one(TabbedContent).active == "crash"
        body = str(screen.query_one("#crash-view .crash-text").render())
        assert "rank 1 failed first" in body and "injected crash" in body
        # rank 0 either failed on its own (its peer was gone) or torchrun stopped it first: a matter of timing,
        # and the panel says whichever the engine decided, in its words
        c = app.model.crash
        assert c.outcomes[0] and f"rank 0: {c.outcomes[0]}" in body
        assert screen.query_one(Banner).has_class("-crash")
        # its exception is why it failed; torchrun may stop it (SIGTERM) while it is still on its way out
        assert app.model.ranks[1].badge() in ("failed (exit 1)", "failed (RuntimeError, then SIGTERM)")


@pytest.mark.timeout(120)
@aio
async def test_quit_mid_run_stops_every_rank(runs_dir):
    app = live_app("cpu-ddp", runs_dir, "steps=100000")
    pids: set[int] = set()
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.model.ranks and all((rv.step or 0) > 2 for rv in app.model.ranks.values()), 60,
                    "every rank past step 2", step=0.2)
        assert app.running and app.model.ranks and all(rv.step for rv in app.model.ranks.values())
        pids = {rv.pid for rv in app.model.ranks.values() if rv.pid} | {p["pid"] for p in app.model.processes.values()}
        assert len(pids) >= 3  # torchrun + 2 ranks
        await pilot.press("q")
        await pilot.press("y")
        await until(pilot, lambda: not app.is_running, 60, "the app to leave", step=0.1)
    app.shutdown(30)
    assert app.engine_done.is_set()
    alive = [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
    assert alive == []
    assert app.model.finished is not None and app.model.finished.status == "stopped"
