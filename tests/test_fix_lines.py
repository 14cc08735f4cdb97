"""Issue 23 item 9: a stall or a mismatch gets a fix line read from its own evidence (which collective, where in the
user's code, which ranks), in the engine: on the HangVerdict, in summary.json, in the console, in verdict.txt."""
from __future__ import annotations

import pytest

import io
import json

from ddptui.runners import events as ev
from ddptui.runners.evidence import fr_analysis
from ddptui.runners.judge.conclusion import Conclusion
from ddptui.runners.evidence.fix_lines import fix_line, for_finding, for_stacks
from ddptui.runners.evidence.hang_verdict import Where
from ddptui.runners.judge.rank_lifecycle import RankLifecycle
from ddptui.runners.judge.run_state import CollectStacks
from ddptui.runners.judge.stack_verdicts import StackVerdicts
from ddptui.tui.console import Console
from tests.support.flight_recorder import dumps, hang_stacks, ranks_at_step_3

pytestmark = pytest.mark.any_python

BARRIER = Where("collective", "barrier", "<module>", "/w/cond_barrier.py", 20, "dist.barrier()")
DDP_BACKWARD = Where("collective", "all_reduce inside backward (DDP bucket all-reduce)", "<module>",
                     "/w/cond_barrier.py", 14, "loss.backward()")
SLEEPS = Where("sleep", "time.sleep", "culprit_wait", "/w/hang_ddp.py", 30, "time.sleep(600)", calls="time.sleep")
LOCK = Where("sleep", "waits on threading (wait)", "wait_for_lock", "/w/train.py", 9, "ev.wait()",
             calls="threading.Event.wait")
IN_ALL_REDUCE = Where("collective", "all_reduce", "main", "/w/hang_ddp.py", 47, "dist.all_reduce(t)")


def finding(case: str) -> fr_analysis.Finding:
    d = dumps(case)
    return fr_analysis.analyse(d, len(d))


def test_a_rank_conditional_barrier_says_which_call_runs_on_which_rank_only_and_where():
    """Two ranks, two calls: no majority; the barrier is the user's own call, the all_reduce DDP's in backward."""
    f = finding("rank_conditional_barrier")
    fix = fix_line(f, {0: BARRIER, 1: DDP_BACKWARD}, f.culprits, f.waiting)
    assert fix == ("every rank must call the same collectives in the same order; the barrier at cond_barrier.py:20 "
                   "runs on rank 0 only (collective #11 in the default group), while rank 1 is in all_reduce inside "
                   "backward (DDP bucket all-reduce) at cond_barrier.py:14; call it on every rank, or on none")
    # the same sides the other way round: still the user's barrier, not DDP's all_reduce, is the conditional call
    swapped = fr_analysis.Finding("op mismatch", "0", "default group", (0, 1), 11, f.call, (0, 1),
                                  sides={0: f.sides[1], 1: f.sides[0]})
    assert "the barrier at cond_barrier.py:20 runs on rank 1 only" in fix_line(
        swapped, {0: DDP_BACKWARD, 1: BARRIER}, (0, 1), ())
    # without stacks (the live reports alone): the call and the collective, no line
    assert for_finding(f) == ("every rank must call the same collectives in the same order; the barrier runs on "
                              "rank 0 only (collective #11 in the default group), while rank 1 is in all_reduce [161]; "
                              "call it on every rank, or on none")


def test_with_a_majority_the_odd_rank_out_is_named():
    ar, bar = fr_analysis.Call("all_reduce", ((64,),), ("Float",)), fr_analysis.Call("barrier", (), ())
    f = fr_analysis.Finding("op mismatch", "0", "default group", (0, 1, 2, 3), 7, ar, (0, 1, 2, 3),
                            sides={0: ar, 1: ar, 2: bar, 3: ar})
    fix = for_finding(f, {2: BARRIER})
    assert "the barrier at cond_barrier.py:20 runs on rank 2 only" in fix and "ranks 0, 1, 3 are in all_reduce" in fix


def test_shapes_and_dtypes_that_differ_say_which_rank_passes_what():
    ar = fr_analysis.Call("all_reduce", ((1024,),), ("Float",))
    f = fr_analysis.Finding("size mismatch", "0", "default group", (0, 1), 5, ar, (0, 1),
                            sides={0: ar, 1: fr_analysis.Call("all_reduce", ((32, 32),), ("Float",))})
    assert for_finding(f, {0: IN_ALL_REDUCE, 1: IN_ALL_REDUCE}) == (
        "every rank must pass the same shapes to each collective: all_reduce #5 at hang_ddp.py:47 gets [1024] on "
        "rank 0, [32, 32] on rank 1; give it the same shape on every rank")
    f = fr_analysis.Finding("dtype mismatch", "0", "default group", (0, 1), 5, ar, (0, 1),
                            sides={0: ar, 1: fr_analysis.Call("all_reduce", ((1024,),), ("Int",))})
    assert "gets float32 on rank 0, int32 on rank 1; give it the same dtype on every rank" in for_finding(f)


def test_a_missing_rank_is_told_what_keeps_it_from_the_collective():
    f = finding("hang_ddp")  # rank 1 sleeps before its backward, rank 0 waits in the bucket all-reduce
    assert fix_line(f, {0: IN_ALL_REDUCE, 1: SLEEPS}, f.culprits, f.waiting) == (
        "rank 1 must reach all_reduce #9 in the default group at hang_ddp.py:47 as the others did; rank 1 is in "
        "culprit_wait() at hang_ddp.py:30 (calls time.sleep): remove that sleep or shorten it below the collective's "
        "timeout")
    sub = finding("subgroup_hang")  # rank 1 skipped its pair's all_reduce and waits in the world's
    assert for_finding(sub).startswith("rank 1 waits in all_reduce #5 in the default group instead of all_reduce #5 "
                                       "in group 1 (ranks 0, 1): the ranks of each group must call")


def test_from_the_stacks_alone():
    assert for_stacks({0: IN_ALL_REDUCE, 1: LOCK}, (1,), (0,), slow=False) == (
        "rank 1 is in wait_for_lock() at train.py:9 (calls threading.Event.wait): what it waits for there never comes "
        "on this rank; make it happen on every rank, or wait with a timeout")
    both = {0: IN_ALL_REDUCE, 1: Where("collective", "barrier", "main", "/w/hang_ddp.py", 52)}
    assert for_stacks(both, (), (0, 1), slow=False).startswith(
        "every rank must call the same collectives in the same order; rank 0 is in all_reduce at hang_ddp.py:47, "
        "rank 1 is in barrier at hang_ddp.py:52")
    same = {0: IN_ALL_REDUCE, 1: IN_ALL_REDUCE}
    assert "find the rank that died or never joined" in for_stacks(same, (), (0, 1), slow=False)
    busy = Where("compute", "compute in step", "step", "/w/train.py", 60)
    assert "check that this loop ends on every rank" in for_stacks({0: IN_ALL_REDUCE, 1: busy}, (1,), (0,), False)
    assert for_stacks({}, (), (), slow=False) == ""  # nothing read: no fix made up


def test_a_slow_down_is_told_as_one_not_as_a_hang():
    fix = fix_line(None, {0: IN_ALL_REDUCE, 1: SLEEPS}, (1,), (0,), slow=True)
    assert fix == ("rank 1 is in culprit_wait() at hang_ddp.py:30 (calls time.sleep) and every rank waits for it at "
                   "the next collective: remove that sleep or shorten it")
    assert "more work a step than the others" in fix_line(
        None, {1: Where("compute", "compute in f", "f", "/w/t.py", 3)}, (1,), (0,), slow=True)
    # a sample that caught every rank inside a collective names no one: no fix
    assert fix_line(None, {0: IN_ALL_REDUCE, 1: IN_ALL_REDUCE}, (), (0, 1), slow=True) == ""


def test_the_verdict_carries_its_fix_into_summary_console_and_the_record_words():
    s = ranks_at_step_3()
    hv = StackVerdicts(s).read(CollectStacks("stall", (0, 1), s.wall), hang_stacks(), "stacks/01-stall",
                               dumps("hang_ddp"))
    assert hv.fix.startswith("rank 1 must reach all_reduce #9 in the default group at hang_ddp.py:47 as the others "
                             "did; rank 1 is in culprit_wait() at hang_ddp.py:30"), hv.fix
    summary = Conclusion(s, RankLifecycle(s), StackVerdicts(s)).summary("stalled", 3, "runs/x", 1.0, 0.1, [], [])
    assert json.loads(json.dumps(summary))["hang"]["fix"] == hv.fix
    out = io.StringIO()
    con = Console(out, color=False)
    con.handle([hv, ev.RunFinished("stalled", 3, "runs/x/summary.json", 2.0, summary)])
    said = out.getvalue()
    assert f"\n    fix: {hv.fix}\n" in said and f"\n  fix: {hv.fix}\n" in said  # as it comes, and in the summary
    # without stacks, the finding still says what to do
    s2 = ranks_at_step_3()
    StackVerdicts(s2).without_stacks((0, 1), s2.wall, finding("rank_conditional_barrier"))
    assert s2.hang.fix.startswith("every rank must call the same collectives in the same order; the barrier runs on "
                                  "rank 0 only")
