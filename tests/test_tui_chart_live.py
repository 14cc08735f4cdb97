"""The loss chart on a REAL run: 2 gloo DDP ranks whose plain `step N loss X` lines fall from about 16 to 1e-11."""
from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

from ddptui.runners.launch.profile.load import adhoc_profile
from ddptui.tui.app import DdpApp, LiveSource
from ddptui.tui.widgets.loss_chart import LossChart
from tests.support.ui import BRAILLE, aio, canvas_cells, until

pytestmark = [
    pytest.mark.main_suite(
        "long end-to-end rank runs (the engine and dashboard under them are in the any_python set); its ad-"
        "hoc ranks run on the test's own interpreter"),
]

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "ddp_fit_to_tiny_loss.py"


@pytest.mark.timeout(150)
@aio
async def test_a_real_run_whose_loss_falls_twelve_decades_is_charted_on_a_log_scale(runs_dir):
    app = DdpApp(source=LiveSource(adhoc_profile([sys.executable, str(FIXTURE)], ["nproc=2"]), runs_dir))
    async with app.run_test(size=(160, 48)) as pilot:
        await until(pilot, lambda: not app.running and app.drawn, 130, "the run to finish and be drawn")
        assert app.run_code == 0, app.run_error
        assert all(rv.losses and rv.losses[-1][0] == 200 for rv in app.model.ranks.values())
        await pilot.press("escape")  # the verdict came forward at the end: back to the ranks tab and its chart
        chart = app.screen.query_one(LossChart)
        await until(pilot, lambda: chart.points == app.model.loss_version, 20, "the chart to draw the last losses")
        lines = chart.render().plain.split("\n")
        assert chart.axes is not None and chart.axes.scale == "log", chart.axes
        assert chart.data.lo < 1e-9 and chart.data.hi > 10
        logs = [math.log10(t) for t in chart.axes.yticks]
        assert len({round(b - a, 6) for a, b in zip(logs, logs[1:])}) == 1, chart.axes.yticks
        assert lines[0].strip().startswith("loss, log scale · steps 1–200")
        cells = canvas_cells(lines)
        assert all(c == " " or ord(c) in BRAILLE for row in cells for c in row), "text drawn over the curves"
        assert [t.plain.split()[1] for t in chart.legend] == ["r0", "r1"]
