"""The replica verdict (runners/evidence/replica.py): which parameter differs, and whether the replicas differed from the first step or drifted apart."""
from __future__ import annotations

import pytest

from ddptui.runners.evidence import replica

pytestmark = pytest.mark.any_python


def _d(*hexes, names=("net.0.weight", "net.0.bias", "net.2.weight")):
    return [[n, h, [2], "float32"] for n, h in zip(names, hexes)]


SAME = _d("a", "b", "c")


def test_identical_incomplete_unavailable():
    assert replica.compare({0: SAME, 1: SAME}, 2).status == "identical"
    r = replica.compare({0: SAME}, 2)
    assert r.status == "incomplete" and r.ranks == (1,)
    assert replica.compare({}, 2).status == "unavailable"


def test_differ_without_first_step_digests_says_only_what_differs():
    r = replica.compare({0: SAME, 1: _d("x", "b", "c")}, 2)
    assert r.status == "differ" and r.param == "net.0.weight" and r.ranks == (1,)
    assert r.text == ("replicas differ: first differing parameter 'net.0.weight': rank 1 differs from rank 0 "
                      "(no majority: the lowest rank is the reference)")
    assert r.origin is None and r.hint is None


def test_xla_replicas_that_differed_from_the_first_step():
    first = {0: _d("a0", "b0", "c0"), 1: _d("a1", "b1", "c1")}
    r = replica.compare({0: SAME, 1: _d("x", "y", "z")}, 2, first, "xla")
    assert r.status == "differ" and r.origin == "first_step" and r.hint == "replicas-differ-from-start-xla"
    assert r.text.startswith("replicas differ: first differing parameter 'net.0.weight'")
    assert ("replicas differed from the first step (initial weights differ: no seed / no broadcast; 'net.0.weight' "
            "already differed at the first optimizer step (rank 1 vs rank 0)) - fix: xm.broadcast_master_param(model) "
            "after building it, or torch.manual_seed(S) before") in r.text


def test_ddp_replicas_that_differed_from_the_first_step_are_not_called_unseeded():
    first = {0: _d("a", "b", "c"), 1: _d("a", "b2", "c"), 2: _d("a", "b", "c")}
    r = replica.compare({0: SAME, 1: _d("a", "q", "c"), 2: SAME}, 3, first, "ddp")
    assert r.origin == "first_step" and r.hint == "replicas-differ-from-start-ddp" and r.ranks == (1,)
    assert "'net.0.bias' already differed at the first optimizer step (rank 1 vs ranks 0, 2)" in r.text
    assert "DistributedDataParallel broadcast rank 0's weights" in r.text and "no seed" not in r.text


def test_plain_ranks_that_differed_from_the_first_step():
    r = replica.compare({0: SAME, 1: _d("x", "b", "c")}, 2, {0: SAME, 1: _d("z", "b", "c")}, "plain")
    assert r.hint == "replicas-differ-from-start" and "torch.manual_seed(S) on every rank" in r.text


def test_replicas_identical_at_the_first_step_drifted():
    r = replica.compare({0: SAME, 1: _d("a", "b", "x")}, 2, {0: SAME, 1: SAME}, "xla")
    assert r.origin == "drifted" and r.hint == "replicas-drifted" and r.param == "net.2.weight"
    assert "replicas drifted apart between step 1 and the end (identical at the first optimizer step)" in r.text
    assert "differed from the first step" not in r.text


def test_no_origin_when_the_first_step_cannot_tell():
    # rank 1 never reached its first step: identical first-step digests of rank 0 alone prove nothing
    r = replica.compare({0: SAME, 1: _d("x", "b", "c")}, 2, {0: SAME}, "xla")
    assert r.origin is None and "drifted" not in r.text and "first step" not in r.text
    # identical among ranks 0, 1 but rank 2 (which differs at the end) has none
    r = replica.compare({0: SAME, 1: SAME, 2: _d("x", "b", "c")}, 3, {0: SAME, 1: SAME}, "plain")
    assert r.origin is None


def test_identical_at_the_end_ignores_the_first_step():
    r = replica.compare({0: SAME, 1: SAME}, 2, {0: SAME, 1: _d("x", "b", "c")}, "xla")
    assert r.status == "identical" and r.origin is None


def test_after_a_stall_no_digests_is_one_sentence_that_says_why():
    """Issue 23 item 10: `replicas unavailable: no rank reported parameter digests (digests taken when the ranks
    exited, not after a completed run)`: the ranks were torn down, they never exited on their own to report."""
    from ddptui.runners.judge.conclusion import Conclusion
    from ddptui.runners.judge.rank_lifecycle import RankLifecycle
    from ddptui.runners.judge.stack_verdicts import StackVerdicts
    from tests.support.flight_recorder import ranks_at_step_3
    s = ranks_at_step_3()
    Conclusion(s, RankLifecycle(s), StackVerdicts(s)).conclude("stalled", 3)
    assert s.replica.status == "unavailable"
    assert s.replica.text == ("replicas not compared: the ranks were stopped before they reported their weights (a rank "
                              "reports them when it exits on its own)")
    assert replica.compare({}, 2).text == ("replicas not compared: no rank reported its weights (a "
                                           "DistributedDataParallel model's, at exit)")
    s = ranks_at_step_3()  # digests that came at exit from a stopped run still say when they were taken
    for r in (0, 1):
        s.tracks[r].digests = SAME
    Conclusion(s, RankLifecycle(s), StackVerdicts(s)).conclude("stalled", 3)
    assert s.replica.text.endswith("(digests taken when the ranks exited, not after a completed run)")
