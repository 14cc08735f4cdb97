"""The shipped multinode-torchrun profile through the real engine: two torchrun agents on this machine form one job
by c10d rendezvous; every rank trains, its own lines land in its own record, and the replicas match."""
from __future__ import annotations

import json

import pytest

from ddptui.runners import events as ev

from tests.support.engine import run_profile

pytestmark = pytest.mark.main_suite(
    "long end-to-end rank runs (the engine and dashboard under them are in the any_python set)")


@pytest.mark.timeout(240)
def test_two_c10d_agents_train_one_job(runs_dir):
    code, rec, session = run_profile("multinode-torchrun", runs_dir, ["steps=15"])
    plan = json.loads((session.run_dir / "plan.json").read_text())
    assert [p["name"] for p in plan["procs"]] == ["torchrun-node0", "torchrun-node1"]
    for p in plan["procs"]:
        assert "c10d" in p["argv"] and "--node-rank" not in p["argv"]
    assert code == 0, "\n".join(rec.lines(None)[-40:])
    verdict = rec.one(ev.ReplicaVerdict)
    assert verdict.status == "identical" and set(verdict.table) == {0, 1}, verdict.text
    hellos = {e.rank: e for e in rec.of(ev.RankHello)}
    assert set(hellos) == {0, 1}
    for rank in (0, 1):  # ddp_mlp prints "[rank N] step ..." lines: each rank's record holds only its own
        own = [ln for ln in rec.lines(rank) if ln.startswith("[rank ")]
        assert own and all(ln.startswith(f"[rank {rank}]") for ln in own), own[:5]
