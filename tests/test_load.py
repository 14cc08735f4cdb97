"""Healthy runs beside a machine held at several times its cores (busy loops, lanes that keep importing torch) get no
false verdict, and a real straggler is still named: plain rank scripts under torchrun and gloo, and PyTorch/XLA."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from ddptui.runners import events as ev
from ddptui.runners.session import EXIT_OK
from tests.support.engine import run_profile, script_profile
from tests.support.loadgen import Load, cores

pytestmark = [
    pytest.mark.main_suite(
        "long end-to-end rank runs (the engine and dashboard under them are in the any_python set); beside "
        "busy loops and lanes importing torch on the test's own interpreter"),
]

BUSY_PER_CORE = 3  # busy loops per core: with the ranks and the importers, about 4-5 runnable processes a core


@pytest.fixture(scope="module")
def machine_load():
    """The machine at several times its cores for this module's runs, started and ended by the module; the lanes
    end themselves after 15 min whatever happens to this session (`timeout`), and carry no test token: they are the
    fixture's, not a test's leftovers."""
    with Load(BUSY_PER_CORE * cores(), importers=2, lifetime=900, token=False) as load:
        yield load


def verdicts(rec) -> list:
    """Every verdict-like event a healthy run must not have: slow or stalled ranks, stalls, hang or slow verdicts."""
    return ([e for e in rec.of(ev.RankState) if e.status in ("slow", "stalled")] + rec.of(ev.StallDetected)
            + rec.of(ev.HangVerdict) + rec.of(ev.CrashVerdict))


def load_said(rec) -> float:
    return max((e.load for e in rec.of(ev.Resources) if e.load is not None), default=0.0)


@pytest.mark.timeout(300)
def test_lock_stepped_ddp_ranks_beside_load_get_no_false_verdict(machine_load, runs_dir, tmp_path):
    """4 DDP ranks on a loaded machine: their batched reports are read at different moments (the issue: 'rank 3 is
    far behind the other ranks' at step 22); ranks in lock-step are never stragglers, nor slow, nor stalled."""
    path = script_profile(tmp_path, "slow_rank_ddp.py", {"SLOW_SECONDS": "0", "STEPS": "150"}, nproc=4, timeout=240)
    code, rec, session = run_profile(path, runs_dir)
    assert code == EXIT_OK and verdicts(rec) == [], (load_said(rec), verdicts(rec))
    summary = json.loads((session.run_dir / "summary.json").read_text())
    assert summary["slow"] is None and summary["hang"] is None
    assert load_said(rec) > cores(), "the machine was not loaded: the test says nothing"


@pytest.mark.timeout(300)
def test_a_straggler_beside_load_is_still_named(machine_load, runs_dir, tmp_path):
    """Ranks not in lock-step (no collective per step): rank 1 sleeps 0.1 s a step and falls far behind rank 0 (which
    then waits for it in the final barrier: stall_after 60 keeps that wait out of this test)."""
    path = script_profile(tmp_path, "independent_ranks.py", {"SLOW_SECONDS": "0.1", "STEPS": "60"}, timeout=240,
                          stall_after=60)
    code, rec, session = run_profile(path, runs_dir)
    assert code == EXIT_OK
    slow = [e for e in rec.of(ev.RankState) if e.status == "slow"]
    assert slow and {e.rank for e in slow} == {1}, [e.to_json() for e in rec.of(ev.RankState)]
    assert slow[0].detail.startswith("at step ") and "steps behind the lead" in slow[0].detail
    summary = json.loads((session.run_dir / "summary.json").read_text())
    assert summary["slow"]["ranks"] == [1] and "rank 1 is far behind the other ranks" in summary["slow"]["text"]


def _xla_venv() -> Path | None:
    import subprocess
    root = Path(__file__).resolve().parent.parent
    out = subprocess.run(["bash", str(root / "scripts/xla-venv.sh"), "--print-path"], capture_output=True,
                         text=True, timeout=10).stdout.strip()
    return Path(out) if out and (Path(out) / ".ddptui-complete").is_file() else None


@pytest.mark.xla
@pytest.mark.timeout(420)
def test_an_xla_run_beside_load_is_neither_stalled_nor_stopped(machine_load, runs_dir):
    """profiles/xla-cpu.yaml as shipped (stall_after 8, on_stall stop): on a loaded machine its replicas' steps take
    seconds; a busy replica is held longer, and ddptui's own turnstile is never taken for a collective."""
    venv = _xla_venv()
    if venv is None:
        pytest.skip("the torch_xla venv is not built: run `make xla-venv` (scripts/xla-venv.sh)")
    code, rec, session = run_profile("xla-cpu", runs_dir, [f"workload.venv={venv}", "steps=6"])
    assert code == EXIT_OK and verdicts(rec) == [], (load_said(rec), [e.to_json() for e in verdicts(rec)])
    assert not [ln for ln in rec.lines(None) if "turnstile" in ln or "mismatch" in ln]

