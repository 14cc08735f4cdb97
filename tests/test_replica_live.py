"""The live replica check: exact digests in the rank, sets compared as they complete, and a real DDP run whose rank 1
changes a weight in place at step 37, named between the checks at steps 30 and 40."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from ddptui.runners import events as ev
from ddptui.runners.evidence import eventcheck
from ddptui.runners.evidence.replica import LiveCheck
from ddptui.runners.judge.judge import EXIT_REPLICAS, TearDown
from ddptui.tui.marks import FAILED
from ddptui.tui.model import RunModel
from ddptui.tui.verdicts import said
from ddptui.tui.widgets.banner import banner_text
from tests.support import judge as jh
from tests.support.cli import ddptui, only_run

pytestmark = pytest.mark.main_suite("real gloo DDP runs, and torch in the test process for the digests")

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "runners" / "inject"))
import ddptui_replica  # noqa: E402  (the rank side, as the ranks import it)

SCRIPT = Path(__file__).resolve().parent / "fixtures" / "ddp_inplace_change_at_37.py"
NAMES = ("net.0.weight", "net.0.bias", "net.2.weight", "net.2.bias")


def _params(odd: str | None = None) -> list:
    return [[n, "bad" if n == odd else f"d-{n}"] for n in NAMES]


# ---- the comparison (pure) ------------------------------------------------------------------------------------------

def test_sets_are_compared_only_when_complete_and_late_ranks_are_no_divergence():
    live, world = LiveCheck(), frozenset(range(4))
    for step in (10, 20, 30):  # ranks 0-2 run ahead; rank 3 is late
        for r in (0, 1, 2):
            assert live.add(r, step, _params(), world) is None
    assert live.compared == 0 and live.agreed is None
    for step in (10, 20, 30):
        assert live.add(3, step, _params(), world) is None
    assert live.compared == 3 and live.agreed == 30
    for r in (0, 2, 3):  # at step 40 rank 1 differs, and reports last
        assert live.add(r, 40, _params(), world) is None
    found = live.add(1, 40, _params("net.2.weight"), world)
    assert found is not None and (found.step, found.since, found.param, found.ranks) == (40, 30, "net.2.weight", (1,))
    assert found.text == ("replicas diverged between step 30 and step 40: first differing parameter `net.2.weight`, "
                          "rank 1 differs from ranks 0, 2, 3")
    assert live.add(0, 50, _params(), world) is None  # said once


def test_a_rank_that_never_reports_a_step_leaves_it_uncompared_and_the_first_difference_is_in_model_order():
    live, world = LiveCheck(keep=3), frozenset(range(3))
    for step in range(10, 200, 10):  # rank 2 finished or died: its steps never come
        for r in (0, 1):
            assert live.add(r, step, _params("net.0.bias" if r == 1 else None), world) is None
    assert live.compared == 0 and len(live.pending) <= 3  # nothing said, and what waits is bounded
    live = LiveCheck()
    for r, odd in ((0, None), (1, "net.2.bias"), (2, None)):
        out = live.add(r, 10, [[n, "x" if n in (odd, "net.0.bias") and r == 1 else f"d-{n}"] for n in NAMES], world)
    assert out is not None and out.param == "net.0.bias" and out.since is None
    assert out.text.startswith("replicas diverged by step 10 (the first check): first differing parameter `net.0.bias`")


def test_a_restarted_rank_s_old_reports_never_complete_a_set():
    live, world = LiveCheck(), frozenset(range(2))
    for step in (10, 20, 30):
        for r in (0, 1):
            live.add(r, step, _params(), world)
    live.add(0, 40, _params("net.2.bias"), world)  # rank 1 fails before its step 40; both start again from step 0
    for r in (0, 1):
        assert live.add(r, 10, _params(), world) is None
    assert (live.compared, live.agreed) == (4, 10)
    for step in (20, 30, 40):  # rank 1 runs ahead: its step 40 meets no stale step 40 of rank 0
        assert live.add(1, step, _params(), world) is None
    for step in (20, 30, 40):
        assert live.add(0, step, _params(), world) is None
    assert (live.compared, live.agreed, live.diverged) == (7, 40, None)


# ---- the digest (the rank side): any differing bit --------------------------------------------------------------

def _pairs(torch):
    one = torch.tensor([1.0, 2.0, 3.0])
    low_bit = one.clone()
    low_bit.view(torch.int32)[1] ^= 1  # 2.0 and the next float up: one low bit
    yield one, low_bit
    yield torch.tensor([1.0, 2.0]), torch.tensor([2.0, 1.0])  # equal float sums, bytes swapped
    yield torch.tensor([0.0, 1.0]), torch.tensor([-0.0, 1.0])  # equal floats, a sign bit
    yield torch.tensor([1.0, 1e-8, -1e-8]), torch.tensor([1.0, 2e-8, -2e-8])  # float sums equal, compensating
    b = torch.randn(3000).to(torch.bfloat16)
    c = b.clone()
    c.view(torch.int16)[2999] ^= 1
    yield b, c
    big = torch.randn(ddptui_replica.CHUNK + 5)  # past one chunk of the weighted sum
    moved = big.clone()
    moved[[0, ddptui_replica.CHUNK]] = moved[[ddptui_replica.CHUNK, 0]]
    yield big, moved


@pytest.mark.parametrize("way", ["cpu", "device"])
def test_digests_tell_apart_tensors_that_differ_in_any_bit_and_agree_on_equal_bytes(way):
    import torch  # here, not at the top: the module is collected on the Pythons whose venvs have no torch (test-pythons)
    digest = ((lambda ts: [ddptui_replica.cpu_digest(t, torch) for t in ts]) if way == "cpu"
              else (lambda ts: ddptui_replica.device_digests(ts, torch)))  # the device way, run on the CPU here
    for a, b in _pairs(torch):
        da, db = digest([a, b])
        assert da != db, (a, b)
        assert digest([a.clone()]) == [da]
    assert digest([torch.ones(4, 4).t()]) == digest([torch.ones(4, 4)])  # bytes compared, not the layout


# ---- the judge: reports in, the verdict and the policy out ------------------------------------------------------

def _report(j, rank: int, step: int, params: list, dt: float) -> list:
    return jh.say(j, rank, dt, "@ddptui " + json.dumps({"k": "replica_digest", "r": rank, "step": step,
                                                         "params": params}))


def test_the_judge_says_the_divergence_once_and_stops_the_run_when_the_profile_says_so():
    j = jh.make("replica_check_every=10", "on_divergence=stop")
    for r in (0, 1):
        assert not jh.of(_report(j, r, 10, _params(), 1.0), ev.ReplicaDiverged)
    assert not jh.of(_report(j, 0, 20, _params(), 2.0), ev.ReplicaDiverged)
    (div,) = jh.of(_report(j, 1, 20, _params("net.2.weight"), 2.1), ev.ReplicaDiverged)
    assert (div.step, div.since, div.param, div.ranks, div.agree, div.stop) == (20, 10, "net.2.weight", (1,), (0,),
                                                                                 True)
    jh.at(j, 2.2)
    out = j.check()
    assert TearDown("replicas differ", EXIT_REPLICAS) in out
    assert "ddptui: on_divergence=stop: replicas diverged, tearing every rank down" in jh.texts(out)
    warn = jh.make("replica_check_every=10")
    for r in (0, 1):
        _report(warn, r, 10, _params("net.0.weight" if r else None), 1.0)
    jh.at(warn, 1.5)
    assert not jh.of(warn.check(), TearDown)  # on_divergence: warn (the default) goes on


def test_the_divergence_is_a_verdict_of_the_dashboard_and_of_the_record():
    e = ev.ReplicaDiverged("replicas diverged between step 30 and step 40: first differing parameter `net.2.weight`, "
                           "rank 1 differs from ranks 0, 2, 3", 40, 30, "net.2.weight", (1,), (0, 2, 3), False, jh.W0)
    back = ev.from_json(json.loads(json.dumps(e.to_json())))
    assert back == e and eventcheck.problem(back) is None  # replayed as it was recorded
    model = RunModel()
    model.apply([e])
    assert [(v.title, v.text, v.mark) for v in said(model)] == [("replicas diverged", e.text, FAILED)]
    assert banner_text(model) == ("-crash", f"REPLICAS DIVERGED: {e.text}")


# ---- a real run: a plain DDP script, 3 gloo ranks ---------------------------------------------------------------

def _run(runs_dir: Path, corrupt: bool, monkeypatch):
    monkeypatch.setenv("CORRUPT", "1" if corrupt else "0")
    res = ddptui("--no-ui", "--set", "runner=env", "--set", "nproc=3", "--set", "replica_check_every=10", "--",
                 sys.executable, str(SCRIPT), runs_dir=runs_dir)
    return res, json.loads((only_run(runs_dir) / "summary.json").read_text())


@pytest.mark.timeout(120)
def test_a_weight_changed_in_place_on_rank_1_at_step_37_is_named_between_steps_30_and_40(tmp_path, monkeypatch):
    said = ("replicas diverged between step 30 and step 40: first differing parameter `net.2.weight`, rank 1 differs "
            "from ranks 0, 2")
    res, summary = _run(tmp_path / "bad", True, monkeypatch)
    assert res.returncode == 4, res.stdout[-3000:] + res.stderr[-3000:]
    assert f"[replicas] {said}" in res.stdout  # live, before the summary
    assert res.stdout.index(said) < res.stdout.index("== ddptui:")
    d = summary["divergence"]
    assert (d["text"], d["step"], d["since"], d["param"], d["ranks"], d["agree"]) == (said, 40, 30, "net.2.weight",
                                                                                      [1], [0, 2])
    assert summary["replica"]["status"] == "differ"  # the end's check agrees: the last word
    assert summary["replica_checks"] == {"every": 10, "compared": 4, "last_agreed": 30}
    events = [json.loads(ln) for ln in (only_run(tmp_path / "bad") / "events.jsonl").read_text().splitlines()]
    assert [e["step"] for e in events if e["kind"] == "replica_diverged"] == [40]  # kept in the record

    res, summary = _run(tmp_path / "good", False, monkeypatch)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert "diverged" not in res.stdout and summary["divergence"] is None
    assert summary["replica_checks"] == {"every": 10, "compared": 6, "last_agreed": 60}  # every check ran, agreed
