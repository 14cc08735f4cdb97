"""`make screenshots`: the screenshots of README and docs/dashboard.md (docs/screenshots/*.svg) from the current
build, by replaying the committed run records (tests/fixtures/records) at 160x50 in UTC, so anyone regenerates the
same pictures."""
from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # the committed records' scenes live beside the tests

RECORDS = ROOT / "tests" / "fixtures" / "records"
PROFILES = ROOT / "profiles"
SIZE = (160, 50)


def replay_app(name: str, until: float | None = None):
    from ddptui.tui.app import DdpApp
    from ddptui.tui.replay import ReplaySource
    return DdpApp(source=ReplaySource(RECORDS / name, until=until))


def collectives_app():
    """The Collectives tab's scene (tests/test_tui_collectives.py) as a run that ended: rank 3 behind at #57."""
    from ddptui.tui.app import DdpApp
    from tests.support.ui import ScriptSource
    from tests.support.collectives_scene import behind_batch, collectives_scenario
    return DdpApp(source=ScriptSource(collectives_scenario() + [behind_batch()]))


def compact_app():
    """The compact per-rank view's scene (tests/test_tui_compact.py): 64 ranks, rank 17 failed, 40 behind, 50 slow."""
    from ddptui.tui.app import DdpApp
    from tests.support.ui import ScriptSource
    from tests.support.scenes import many_ranks
    return DdpApp(source=ScriptSource(many_ranks()))


def shots() -> dict:
    """File name -> (the app, the keys pressed once its run is drawn)."""
    from ddptui.tui.app import DdpApp
    return {
        "picker.svg": (DdpApp(), ()),
        "running.svg": (replay_app("cpu-ddp", until=8.90), ()),
        "stall.svg": (replay_app("hang"), ("escape",)),
        "stacks.svg": (replay_app("hang"), ()),
        "crash.svg": (replay_app("crash"), ()),
        "verdict.svg": (replay_app("cpu-ddp"), ()),
        "timeline.svg": (replay_app("crash"), ("escape", "t")),
        "zoom.svg": (replay_app("crash"), ("escape", "1", "z")),
        "help.svg": (replay_app("cpu-ddp"), ("question_mark",)),
        "collectives.svg": (collectives_app(), ("o",)),
        "compact.svg": (compact_app(), ()),
    }


async def export(app, path: Path, keys: tuple[str, ...] = ()) -> None:
    from tests.support.ui import until
    async with app.run_test(size=SIZE) as pilot:
        if app.source is not None:  # the whole record replayed, its end handled and everything drawn
            await until(pilot, lambda: app.worker is not None and not app.running and app.drawn, 60,
                        "the replay to be drawn")
        else:
            await pilot.pause()
        for k in keys:
            await pilot.press(k)
            await pilot.pause()
        await pilot.wait_for_scheduled_animations()  # the tab underline slides to the tab the run ended on
        app.save_screenshot(path.name, str(path.parent))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "screenshots", help="folder for the SVGs")
    ap.add_argument("names", nargs="*", help="only these (e.g. stall.svg); default: every screenshot")
    args = ap.parse_args(argv)
    os.environ["TZ"] = "UTC"  # the records' rank lines carry the wall times they were recorded at, in UTC
    time.tzset()
    import ddptui.tui.screens.picker as picker
    picker.find_profiles = lambda extra=None: [PROFILES / f"{n}.yaml" for n in ("cpu-ddp", "crash", "hang")]
    args.out.mkdir(parents=True, exist_ok=True)
    todo = shots()
    unknown = [n for n in args.names if n not in todo]
    if unknown:
        print(f"screenshots: unknown {', '.join(unknown)}; known: {', '.join(todo)}", file=sys.stderr)
        return 2
    for name, (app, keys) in todo.items():
        if args.names and name not in args.names:
            continue
        asyncio.run(export(app, args.out / name, keys))
        print("wrote", args.out / name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
