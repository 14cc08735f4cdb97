"""A real 2-rank torchrun run says what each rank does before its first step: spawning, starting python, importing
torch, setting up, rendezvous, waiting for the first step (runners/inject/ddptui_phase.py, RankPhase events), with
Flight Recorder off or on, and the record replays the same phases into the dashboard's model."""
from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest

from ddptui.runners import events as ev
from ddptui.runners.session import EXIT_OK
from ddptui.tui.console import Console
from ddptui.tui.model import RunModel
from tests.support.engine import run_profile

pytestmark = pytest.mark.main_suite(
    "long end-to-end rank runs (the engine and dashboard under them are in the any_python set)")

FIXTURES = Path(__file__).resolve().parent / "fixtures"
ORDER = ["importing torch", "setting up", "rendezvous", "waiting for first step"]


def _profile(tmp_path: Path, fr: bool) -> Path:
    path = tmp_path / "rank-joins-late.yaml"
    path.write_text("name: rank-joins-late\nrunner: torchrun\nnproc: 2\nbackend: gloo\nstall_after: 60\n"
                    f"timeout: 150\nflight_recorder: {str(fr).lower()}\nworkload:\n  script: {FIXTURES / 'rank_joins_late_ddp.py'}\n")
    return path


def _phases(events, rank: int) -> list[tuple[str, float]]:
    """(phase, since) as the dashboard's model goes through them, folding the events one by one."""
    m, seen = RunModel(), []
    for e in events:
        m.apply([e])
        rv = m.ranks.get(rank)
        if rv is not None and (not seen or seen[-1][0] != rv.phase):
            seen.append((rv.phase, rv.phase_since))
    return seen


@pytest.mark.timeout(160)
@pytest.mark.parametrize("fr", [False, True], ids=["flight-recorder-off", "flight-recorder-on"])
def test_rank_phases_in_order_from_spawn_to_first_step(tmp_path, fr):
    """With Flight Recorder off, init_process_group is wrapped for the phases alone; on, ddptui_fr wraps it too."""
    code, rec, session = run_profile(_profile(tmp_path, fr), tmp_path / "runs")
    assert code == EXIT_OK, [ln for e in rec.of(ev.LogLines) for ln in e.lines][-30:]
    for r in (0, 1):
        said = [e for e in rec.of(ev.RankPhase) if e.rank == r]
        assert [e.phase for e in said] == ORDER, said
        walls = [e.wall for e in said]
        assert walls == sorted(walls)
        first = min(e.wall for e in rec.of(ev.Progress) if e.rank == r)
        assert walls[-1] <= first
    # rank 1 prepares 4 s between torch's import and its rendezvous; rank 0's rendezvous ends only once rank 1's began
    at = {(e.rank, e.phase): e.wall for e in rec.of(ev.RankPhase)}
    assert at[1, "rendezvous"] - at[1, "setting up"] >= 3.0  # read times: the engine may read the first late
    assert at[0, "waiting for first step"] >= at[1, "rendezvous"]
    # every phase report was taken out of the ranks' output
    assert not [ln for e in rec.of(ev.LogLines) for ln in e.lines if "@ddptui" in ln]

    recorded = [ev.from_json(json.loads(ln)) for ln in (session.run_dir / "events.jsonl").read_text().splitlines()]
    assert [(e.rank, e.phase) for e in recorded if isinstance(e, ev.RankPhase)] == \
        [(e.rank, e.phase) for e in rec.of(ev.RankPhase)]
    for r in (0, 1):
        seen = [p for p, _ in _phases(recorded, r)]
        assert seen == ["", "spawning", "starting python", *ORDER, ""], seen
    # the host's load came with the resource samples, and is in the record
    loads = [e for e in recorded if isinstance(e, ev.Resources) and e.load is not None]
    assert loads and all(e.cpus and e.cpus >= 1 and e.load >= 0 for e in loads)
    # the headless summary says the run's pace, its samples/s (16 rows a forward, one forward a step) and the highest load
    out = io.StringIO()
    Console(out=out, color=False).handle(rec.events)
    summary = out.getvalue().split("\n== ddptui:")[-1]
    assert re.search(r"^pace: [0-9.]+ steps/s, [0-9.]+ m?s/step \(rank [01], the slowest, first step to last\), "
                     r"[0-9.]+k? samples/s \(all ranks, 16 a step each\); "
                     r"machine load up to [0-9.]+", summary, re.M), summary
