"""A real 2-rank torchrun run of a plain DDP loop that accumulates gradients and evaluates between epochs: each rank's
samples per optimizer step come from its model's training inputs (4 micro-batches of 12), never from the evaluation
pass, and reach the events, summary.json and the headless summary's samples/s."""
from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest

from ddptui.runners import events as ev
from ddptui.runners.session import EXIT_OK
from ddptui.tui.console import Console
from tests.support.engine import run_profile

pytestmark = pytest.mark.main_suite(
    "long end-to-end rank runs (the engine and dashboard under them are in the any_python set)")

FIXTURES = Path(__file__).resolve().parent / "fixtures"


@pytest.mark.timeout(150)
def test_samples_per_step_of_an_accumulating_loop_reach_events_summary_and_console(tmp_path):
    script = FIXTURES / "accumulating_ddp.py"
    assert "ddptui" not in script.read_text()
    profile = tmp_path / "accumulate.yaml"
    profile.write_text(f"name: accumulate\nrunner: torchrun\nnproc: 2\nbackend: gloo\ntimeout: 120\n"
                       f"workload:\n  script: {script}\n")
    code, rec, session = run_profile(profile, tmp_path / "runs")
    assert code == EXIT_OK, [ln for e in rec.of(ev.LogLines) for ln in e.lines][-30:]
    for r in (0, 1):
        told = [e.samples for e in rec.of(ev.Progress) if e.rank == r]
        assert told and set(told) == {48}, told  # 4 x 12 each step; the 100 held-out rows never counted
        assert max(e.step for e in rec.of(ev.Progress) if e.rank == r) == 15
    summary = json.loads((session.run_dir / "summary.json").read_text())
    assert {r: v["samples_per_step"] for r, v in summary["ranks"].items()} == {"0": 48, "1": 48}
    out = io.StringIO()
    Console(out=out, color=False).handle(rec.events)
    said = out.getvalue().split("\n== ddptui:")[-1]
    assert re.search(r"^pace: .*first step to last\), [0-9.]+k? samples/s \(all ranks, 48 a step each\)", said, re.M), said
