"""The dashboard replaying a committed run record to its end, and the text each view then shows."""
from __future__ import annotations

import shutil
from pathlib import Path

from textual.widgets import Static

from ddptui.tui.app import DdpApp
from ddptui.tui.replay import ReplaySource
from ddptui.tui.widgets.banner import Banner
from ddptui.tui.widgets.collectives_view import CollectivesView, CollRow
from tests.support.ui import screen_text, settle, steady, until

RECORDS = Path(__file__).resolve().parents[1] / "fixtures" / "records"
PROFILES = Path(__file__).resolve().parents[2] / "profiles"


def runs_folder(where: Path) -> Path:
    """A runs folder in `where`: the four real records, and a fifth whose engine was killed mid-write (no summary,
    its last line cut)."""
    runs = where / "runs"
    for name in ("cpu-ddp", "crash", "hang", "slow-collectives"):
        shutil.copytree(RECORDS / name, runs / name)
    cut = runs / "crash-killed"
    shutil.copytree(RECORDS / "crash", cut)
    (cut / "summary.json").unlink()
    lines = (cut / "events.jsonl").read_bytes().splitlines(keepends=True)
    (cut / "events.jsonl").write_bytes(b"".join(lines[:20]) + lines[20][:25])
    return runs


def replay_app(name: str, until: float | None = None) -> DdpApp:
    return DdpApp(source=ReplaySource(RECORDS / name, until=until))


async def replayed(pilot) -> None:
    """The whole record replayed, its end handled and everything drawn (the chart too: the end is not held back)."""
    app = pilot.app
    await until(pilot, lambda: app.worker is not None and not app.running and app.drawn, 30, "the replay to be drawn")
    await steady(pilot)


# ---- what a replayed real run shows (test_engine_e2e.py's `slow` run, test_fr_verdicts.py's conditional barrier) ----
async def replayed_views(run_dir: Path, size=(160, 44)) -> dict:
    """The finished dashboard of a run record, each view's text: banner, verdict (head and per-rank rows), hints,
    collectives (head and rows by (rank, group): (text, state)), and whether the replica digests heading shows."""
    app = DdpApp(source=ReplaySource(run_dir))
    out: dict = {}
    async with app.run_test(size=size) as pilot:
        await settle(pilot, app, 60)
        screen = app.screen
        out["banner"] = str(screen.query_one(Banner).render())
        await pilot.press("v")
        out["verdict"] = str(screen.query_one("#verdict-view .verdict-head").render())
        out["rows"] = screen_text(app)
        out["replica_heading"] = screen.query_one(".replica-head", Static).display
        await pilot.press("h")
        out["hints"] = str(screen.query_one(".hints-text", Static).render())
        await pilot.press("o")
        view = screen.query_one(CollectivesView)
        out["collectives"] = str(view.query_one(".coll-head", Static).render())
        out["coll_rows"] = {w.key: w.shown for w in view.query(CollRow)}
    return out
