"""Pilot test: the run screen says each rank's start-up phase with its seconds instead of "(no output yet)", then the
run's steps/s, ETA and the machine's load in its header and each rank's step time in its pane (scripted events)."""
from __future__ import annotations

import pytest

from ddptui.runners import events as ev
from ddptui.tui.app import DdpApp
from ddptui.tui.widgets.rank_pane import RankPane
from tests.support.ui import GatedSource, aio, on_screen, screen_text

pytestmark = pytest.mark.any_python


def starting(t0: float):
    def stage(now: float):
        return [ev.RunStarted("runs/x", "pace", "torchrun", 2, 500, t0),
                ev.ProcessStarted("torchrun", 100, (0, 1), t0 + 0.1),
                ev.RankHello(0, 101, "h", 2, t0 + 2), ev.RankHello(1, 102, "h", 2, t0 + 2),
                ev.RankPhase(0, "rendezvous", t0 + 5), ev.RankPhase(1, "importing torch", t0 + 3),
                ev.Resources({}, {}, t0 + 17, 29.7, 2)]
    return stage


def training(t0: float):
    def stage(now: float):
        out = []
        for i in range(1, 6):  # 10 steps a read, a read a second: 10 steps/s, 0.1 s a step; rank 1 half as fast
            w = t0 + 20 + i
            out.append(ev.Progress(0, 100 + 10 * i, 0.5, w, "report", tuple((s, 0.5) for s in range(91 + 10 * i, 101 + 10 * i))))
            out.append(ev.Progress(1, 100 + 5 * i, 0.5, w, "report", tuple((s, 0.5) for s in range(96 + 5 * i, 101 + 5 * i))))
        out.append(ev.Resources({0: 99.0, 1: 98.0}, {0: 300 << 20, 1: 300 << 20}, t0 + 26, 1.5, 2))
        return out
    return stage


@pytest.mark.timeout(40)
@aio
async def test_header_and_panes_say_phase_then_pace_eta_and_load():
    t0 = 1_764_000_000.0
    src = GatedSource([starting(t0), training(t0)])
    app = DdpApp(source=src)
    async with app.run_test(size=(160, 48)) as pilot:
        head = "load 29.7 on 2 cpus (overloaded)"
        assert await on_screen(pilot, app, lambda t: head in t and "(rendezvous 12s)" in t), screen_text(app)
        text = screen_text(app)
        assert "(importing torch 14s)" in text and "(no output yet)" not in text
        tails = {p.rank: p.render().plain for p in app.screen.query(RankPane)}  # a pane is its own TailView
        assert tails == {0: "(rendezvous 12s)", 1: "(importing torch 14s)"}
        assert "steps/s" not in text  # no step timed yet: no pace, no ETA

        src.release(1)
        want = " · 5.0 steps/s · ETA 1m15s"  # rank 1: 375 steps left at 0.2 s
        assert await on_screen(pilot, app, lambda t: want in t and " · load 1.5/2 cpus" in t), screen_text(app)
        text = screen_text(app)
        assert "step 150/500 0.10 s/step" in text and "step 125/500 0.20 s/step" in text, text
        assert "rendezvous" not in text and "importing torch" not in text
        src.request_stop()
