"""The dashboard's keypress-to-repaint latency under a synthetic engine's load (tests/test_tui_latency.py, bench/)."""
from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path

from textual import events as tev
from textual.widgets import TabbedContent

from .app import DdpApp
from .follow import FollowSource
from .synthetic import SyntheticSource


async def _measure(ranks: int, rate: int, seconds: float, presses: int, size: tuple[int, int],
                   collectives: bool = True, other: str = "ranks", period: float = 0.02,
                   follow: str | None = None) -> dict:
    source: SyntheticSource | FollowSource
    if follow:  # a viewer of a record another process writes: its reading counts as the dashboard's CPU
        source = FollowSource(Path(follow))
    else:
        source = SyntheticSource(ranks=ranks, lines_per_s=rate, seconds=seconds + 30, collectives=collectives,
                                 period=period)
    app = DdpApp(source=source)
    lat: list[float] = []
    async with app.run_test(size=size) as pilot:
        await pilot.pause(1.0)  # let the load build up
        t_start = time.perf_counter()
        cpu0, gen0 = time.process_time(), getattr(source, "thread_cpu", 0.0)
        read0 = getattr(source, "read_cpu", 0.0)
        model, driver = app.model, app._driver
        assert model is not None and driver is not None  # the source started, the test driver runs
        lines0 = model.lines_seen
        for _ in range(presses):
            screen = app.screen
            tabs = screen.query_one("#tabs", TabbedContent)
            want = other if tabs.active == "timeline" else "timeline"
            key = "o" if want == "collectives" else "t"  # t toggles the timeline and the grid, o shows collectives
            done = asyncio.Event()
            t0 = time.perf_counter()
            driver.send_message(tev.Key(key, key))
            while tabs.active != want:
                await asyncio.sleep(0.0005)
            screen.call_after_refresh(done.set)
            await done.wait()
            lat.append(time.perf_counter() - t0)
            await asyncio.sleep(max(0.0, seconds / presses - lat[-1]))
        elapsed = time.perf_counter() - t_start
        ui_cpu = (time.process_time() - cpu0) - (getattr(source, "thread_cpu", 0.0) - gen0)
        read_cpu = getattr(source, "read_cpu", 0.0) - read0
        lines = model.lines_seen - lines0
        view = "rows" if getattr(app.screen, "compact_on", False) else "panes"  # the compact view or the pane grid
        source.request_stop()
    app.shutdown(10)
    lat.sort()
    return {
        "ranks": ranks, "lines_per_s_per_rank": rate, "presses": presses, "collectives": collectives, "tabs": other,
        "view": view, "p50_ms": round(lat[len(lat) // 2] * 1000, 1), "p95_ms": round(lat[int(len(lat) * 0.95) - 1] * 1000, 1),
        "max_ms": round(lat[-1] * 1000, 1),
        "lines_per_s_absorbed": round(lines / elapsed), "lines_per_s_offered": ranks * rate,
        "ui_cpu_percent": round(100 * ui_cpu / elapsed, 1),  # of one core, the load generator's thread left out
        "read_cpu_percent": round(100 * read_cpu / elapsed, 1),  # of ui_cpu_percent: a viewer's reading of the record
    }


def measure_latency(ranks: int = 16, rate: int = 1000, seconds: float = 6.0, presses: int = 30,
                    size: tuple[int, int] = (160, 50), collectives: bool = True, other: str = "ranks",
                    period: float = 0.02, follow: str | None = None) -> dict:
    """Keypress (t: toggle timeline) → next repaint, in ms, while ranks × rate log lines/s stream in (and, with
    `collectives`, every rank's Flight Recorder numbers every 2 s, as with flight_recorder on). `other`: the tab
    the timeline alternates with ("collectives": its live rows are drawn half the time). `period`: how often the
    synthetic engine sends a batch (0.25: the engine's read turn while ranks only trickle, as at 1,024 ranks x 10
    lines/s, where each batch holds every rank's lines and progress of the turn)."""
    return asyncio.run(_measure(ranks, rate, seconds, presses, size, collectives, other, period, follow))


if __name__ == "__main__":
    args = [int(a) for a in sys.argv[1:3]]
    print(json.dumps(measure_latency(*args)))  # type: ignore[arg-type]  # ranks and rate, the first two
