"""The Flight Recorder analysis on dumps recorded from real gloo ranks (tests/data/fr, made by its record.py from the
plain programs in tests/fixtures), checked against PyTorch's own torchfrtrace, and the hang verdict it leads."""
from __future__ import annotations

import json
import os
import pickle
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ddptui.runners.evidence import fr_analysis
from ddptui.runners.evidence import fr_records
from ddptui.runners.judge import run_verdicts
from ddptui.runners.judge.conclusion import Conclusion
from ddptui.runners.launch.profile.load import load_profile
from ddptui.runners.launch.registry import traits_of
from ddptui.runners.judge.rank_lifecycle import RankLifecycle
from ddptui.runners.judge.run_state import CollectStacks, RunState
from ddptui.runners.judge.stack_verdicts import StackVerdicts
from tests.support.flight_recorder import dumps, hang_stacks, ranks_at_step_3

pytestmark = pytest.mark.any_python

ROOT = Path(__file__).resolve().parent.parent


def find(case: str, **kw) -> fr_analysis.Finding:
    d = dumps(case)
    return fr_analysis.analyse(d, kw.pop("world", len(d)), **kw)


# ---- every finding kind on real dumps ------------------------------------------------------------------------------
def test_a_rank_that_never_entered_the_collective_is_missing():
    f = find("hang_ddp")  # DDP: rank 1 sleeps before backward at step 3, rank 0 waits in the bucket all-reduce
    assert (f.kind, f.pg, f.seq, f.entered, f.missing, f.last) == ("missing", "0", 9, (0,), (1,), {1: 8})
    assert (f.culprits, f.waiting, f.outside) == ((1,), (0,), ())
    assert f.sentence({1: "is stuck in culprit_wait() at hang_ddp.py:30"}, {0: "hang_ddp.py:47"}) == (
        "collective #9 (all_reduce, 1 tensor [161] float32, default group): rank 0 entered it at hang_ddp.py:47, "
        "rank 1 never did (its last was #8); rank 1 is stuck in culprit_wait() at hang_ddp.py:30")


def test_a_rank_conditional_barrier_is_an_op_mismatch_naming_both_sides():
    f = find("rank_conditional_barrier")
    assert (f.kind, f.seq, f.entered, f.culprits, f.waiting) == ("op mismatch", 11, (0, 1), (0, 1), ())
    assert {r: c.text() for r, c in f.sides.items()} == {0: "barrier", 1: "all_reduce [161]"}
    assert f.sentence() == ("ranks disagree at collective #11 in the default group: rank 0 called barrier, "
                            "rank 1 all_reduce [161] (a rank-conditional collective)")


def test_a_skipped_all_reduce_shows_where_the_counts_part_at_the_end():
    # rank 1 skipped step 5's all_reduce: its final barrier meets rank 0's last all_reduce
    f = find("skip_one_allreduce")
    assert (f.kind, f.seq) == ("op mismatch", 20)
    assert {r: c.text() for r, c in f.sides.items()} == {0: "all_reduce [33]", 1: "barrier"}


def test_a_hang_in_a_subgroup_names_the_group_and_the_ranks_outside_it():
    # ranks 0,1 and 2,3 are pairs; rank 1 skipped its pair's all_reduce and waits in the world one for rank 0
    f = find("subgroup_hang")
    assert (f.kind, f.pg, f.members, f.seq, f.entered, f.missing) == ("missing", "1", (0, 1), 5, (0,), (1,))
    assert f.outside == (2, 3) and f.elsewhere == {1: "all_reduce #5 in the default group"}
    assert f.sentence() == (
        "collective #5 (all_reduce, 1 tensor [64] float32, group 1 (ranks 0, 1)): rank 0 entered it, rank 1 never did "
        "(its last was #4); rank 1 waits in all_reduce #5 in the default group instead; ranks 2, 3 are not in this group")


def test_a_member_without_a_dump_is_named():
    d = dumps("hang_ddp")
    del d[1]
    f = fr_analysis.analyse(d, world=2)
    assert (f.kind, f.entered, f.missing, f.absent, f.culprits) == ("missing", (0,), (), (1,), (1,))
    assert f.sentence().endswith("rank 0 entered it; no Flight Recorder dump from rank 1")


def test_every_collective_complete_is_none_also_when_gloo_notes_a_completion_late():
    d = dumps("healthy")  # dumped as each rank called destroy_process_group
    st = {r: x["pg_status"]["0"] for r, x in d.items()}
    assert st[1]["last_enqueued_collective"] != st[1]["last_completed_collective"]  # rank 1's barrier: not noted yet
    f = fr_analysis.analyse(d, 2)
    assert f.kind == "none" and f.culprits == () and f.to_dict()["kind"] == "none"


@pytest.mark.parametrize("case,kind,said", [
    ("dtype_differs", "dtype mismatch", "dtype mismatch at #5 (default group): all_reduce float32 on rank 0, int32 on rank 1"),
    ("shape_differs", "size mismatch", "size mismatch at #5 (default group): all_reduce [1024] on rank 0, [32, 32] on rank 1"),
])
def test_a_mismatch_gloo_let_through_is_found_in_the_history(case, kind, said):
    # same bytes, so gloo noticed nothing and both ranks went on: no hang, a wrong result
    f = find(case)
    assert (f.kind, f.seq, f.completed, f.culprits) == (kind, 5, True, (0, 1))
    assert f.sentence() == f"{said}; every rank went through it: its result is wrong, no hang there"


def test_a_size_mismatch_at_the_frontier_names_the_sizes():
    # gloo aborts on a size mismatch that moves different byte counts, so no real dump holds one pending: the
    # rank-conditional dump with rank 1's pending all_reduce turned into one of another size
    d = dumps("rank_conditional_barrier")
    last0, last1 = d[0]["entries"][-1], d[1]["entries"][-1]
    last0.update(profiling_name=last1["profiling_name"], input_sizes=[[1024]], input_dtypes=["Float"])
    last1.update(input_sizes=[[1000]])
    f = fr_analysis.analyse(d, 2)
    assert (f.kind, f.seq, f.completed) == ("size mismatch", 11, False)
    assert f.sentence() == "size mismatch at #11 (default group): all_reduce [1024] on rank 0, [1000] on rank 1"


def test_raw_and_normalised_dumps_give_the_same_finding():
    for case in ("hang_ddp", "subgroup_hang", "rank_conditional_barrier"):
        d = dumps(case)
        assert fr_analysis.analyse(fr_records.normalise_all(d, len(d)), len(d)) == fr_analysis.analyse(d, len(d))


def test_the_live_collective_reports_give_the_finding_when_no_dump_was_taken():
    # the `coll` report shape (RankTrack.collectives): numbers as strings or ints, the frontier op without "gloo:"
    coll = {0: {"0": {"desc": "default_pg", "ranks": "[0, 1]", "enqueued": "9", "completed": "8",
                      "frontier": {"seq": 9, "op": "all_reduce", "sizes": [[161]], "dtypes": ["Float"]}}},
            1: {"0": {"desc": "default_pg", "ranks": "[0, 1]", "enqueued": 8, "completed": 8, "frontier": None}}}
    f = fr_analysis.from_collectives(coll, 2)
    assert (f.kind, f.seq, f.missing, f.last) == ("missing", 9, (1,), {1: 8})
    assert f.sentence().startswith("collective #9 (all_reduce, 1 tensor [161] float32, default group): rank 0 entered")
    assert fr_analysis.from_collectives({}, 2) is None and fr_analysis.analyse({}, 2) is None


def test_the_finding_survives_json_as_the_verdicts_collective():
    d = json.loads(json.dumps(find("subgroup_hang").to_dict()))
    assert (d["kind"], d["pg"], d["seq"], d["op"], d["culprits"], d["outside"]) == ("missing", "1", 5, "all_reduce",
                                                                                   [1], [2, 3])
    assert d["sentence"].startswith("collective #5 (all_reduce")


# ---- against PyTorch's own analyzer --------------------------------------------------------------------------------
def _torchfrtrace() -> str | None:
    for p in (ROOT / ".venv" / "bin" / "torchfrtrace", Path(sys.executable).parent / "torchfrtrace"):
        if p.exists():
            return str(p)
    return shutil.which("torchfrtrace")


@pytest.mark.timeout(240)
@pytest.mark.parametrize("case", ["hang_ddp", "subgroup_hang", "rank_conditional_barrier", "skip_one_allreduce"])
def test_torchfrtrace_reads_the_same_dumps_the_same_way(case, tmp_path):
    tool = _torchfrtrace()
    if tool is None:
        pytest.skip("no torchfrtrace (PyTorch's analyzer) next to this interpreter or in .venv")
    d = dumps(case)
    for r, x in fr_records.normalise_all(d, len(d)).items():  # the record's format: one pickle per rank
        (tmp_path / f"rank_{r}").write_bytes(pickle.dumps(x))
    p = subprocess.run([tool, str(tmp_path), "--prefix", "rank_"], capture_output=True, text=True, timeout=200,
                       env={**os.environ, "PYTHONWARNINGS": "ignore"})
    out = p.stdout + p.stderr
    ours = fr_analysis.analyse(d, len(d))
    if ours.kind == "missing":
        blocks = re.findall(r"Not all ranks joining collective, sequence number: (\d+)\n.*?group info: (\S+)\n.*?"
                            r"missing ranks: \{([\d, ]+)\}", out, re.S)
        theirs = {(int(seq), pg.split(":")[0], tuple(int(x) for x in miss.split(","))) for seq, pg, miss in blocks}
        assert (ours.seq, ours.pg, ours.missing) in theirs, out
    else:
        m = re.search(r"Collective sequence number: (\d+) has errors.*?group info: (\S+).*?Error type: "
                      r"COLLECTIVE_TYPE_MISMATCH, Expected collective type: '(\w+)' does not match found collective "
                      r"type: '(\w+)'", out, re.S)
        assert m, out
        assert (int(m.group(1)), m.group(2).split(":")[0]) == (ours.seq, ours.pg)
        assert {m.group(3), m.group(4)} == {c.op for c in ours.sides.values()}


def test_the_verdict_leads_with_the_finding_and_ends_with_the_culprits_own_frame():
    s = ranks_at_step_3()
    hv = StackVerdicts(s).read(CollectStacks("stall", (0, 1), s.wall), hang_stacks(), "stacks/01-stall",
                               dumps("hang_ddp"))
    assert (hv.culprits, hv.waiting) == ((1,), (0,))
    assert hv.text.startswith(
        "collective #9 (all_reduce, 1 tensor [161] float32, default group): rank 0 entered it at hang_ddp.py:47, "
        "rank 1 never did (its last was #8); rank 1 is stuck in culprit_wait() at hang_ddp.py:30 (calls time.sleep), "
        "step 3; no progress since "), hv.text
    assert hv.collective["kind"] == "missing" and hv.collective["culprits"] == [1] and s.hang is hv
    summary = Conclusion(s, RankLifecycle(s), StackVerdicts(s)).summary("stalled", 3, "runs/x", 1.0, 0.1, [], [])
    assert json.loads(json.dumps(summary))["hang"]["collective"]["seq"] == 9


def test_gloo_noting_every_members_collective_late_finds_where_the_members_part():
    """gloo has noted no member completing #8, every member entered it and rank 0 went on to #9: gloo completes what
    every member entered, so the hang is at #9, which rank 1 never entered. The same numbers from a backend that
    notes completions as they happen (NCCL's watchdog) are a collective stuck with every member in it."""
    late = dumps("hang_ddp")
    for d in late.values():
        d["pg_status"]["0"]["last_completed_collective"] = "7"
    f = fr_analysis.analyse(late, 2)
    assert (f.kind, f.seq, f.entered, f.missing, f.culprits) == ("missing", 9, (0,), (1,), (1,))
    for d in late.values():
        for e in d["entries"]:
            e["profiling_name"] = e["profiling_name"].replace("gloo:", "nccl:")
    assert fr_analysis.analyse(late, 2).kind == "stuck"
    live = {r: {"0": {"desc": "default_pg", "ranks": [0, 1], "enqueued": enq, "completed": 7,
                      "frontier": {"seq": 8, "op": "all_reduce", "sizes": [[161]], "dtypes": ["Float"]}}}
            for r, enq in ((0, 9), (1, 8))}
    for backend, want in (("gloo", ("missing", 9, (1,))), ("nccl", ("stuck", 8, ())), (None, ("stuck", 8, ()))):
        for g in live.values():
            g["0"]["frontier"]["backend"] = backend
        f = fr_analysis.from_collectives(live, 2)
        assert (f.kind, f.seq, f.culprits) == want, backend
    even = {r: {"0": {**g["0"], "enqueued": 9, "frontier": {**g["0"]["frontier"], "backend": "gloo"}}}
            for r, g in live.items()}  # both went on: nothing says who holds the other
    assert fr_analysis.from_collectives(even, 2).kind == "stuck"


def test_a_completion_gloo_noted_late_does_not_hide_the_rank_outside_any_collective():
    """As CI once saw on the built-in hang: rank 0 already waits in #9 but gloo has noted no rank completing #8, so
    every member "entered #8 and none completed it". The stacks find rank 1 asleep outside any collective: it is the
    culprit, and the fix is the stacks', not a lost peer's or a stuck network's."""
    late = dumps("hang_ddp")
    for d in late.values():
        d["pg_status"]["0"]["last_completed_collective"] = "7"
        for e in d["entries"]:  # as a backend would say it that ddptui takes to note completions as they happen
            e["profiling_name"] = e["profiling_name"].replace("gloo:", "nccl:")
    f = fr_analysis.analyse(late, 2)
    assert (f.kind, f.seq, f.entered, f.culprits) == ("stuck", 8, (0, 1), ())
    s = ranks_at_step_3()
    hv = StackVerdicts(s).read(CollectStacks("stall", (0, 1), s.wall), hang_stacks(), "stacks/01-stall", late)
    assert (hv.culprits, hv.waiting) == ((1,), (0,))
    assert hv.text.startswith("rank 1 is stuck in culprit_wait() at hang_ddp.py:30"), hv.text
    assert "completion noted late" in hv.text and "network" not in hv.fix and "culprit_wait" in hv.fix, hv.fix
    assert hv.collective["kind"] == "stuck"  # the Collectives tab still shows what Flight Recorder holds


def test_a_mismatch_verdict_names_both_sides_with_their_frames():
    s = ranks_at_step_3()
    hv = StackVerdicts(s).read(CollectStacks("stall", (0, 1), s.wall), hang_stacks(), "stacks/01-stall",
                               dumps("rank_conditional_barrier"))
    assert hv.culprits == (0, 1) and hv.waiting == ()
    assert hv.text.startswith("ranks disagree at collective #11 in the default group: rank 0 called barrier, rank 1 "
                              "all_reduce [161] (a rank-conditional collective); rank 0 waits in all_reduce inside "
                              "backward (DDP bucket all-reduce) at hang_ddp.py:47, step 3"), hv.text
    assert "; rank 1 is stuck in culprit_wait() at hang_ddp.py:30 (calls time.sleep), step 3" in hv.text


def test_without_a_finding_the_stack_verdict_is_exactly_as_before():
    for fr in (None, {}, dumps("healthy")):
        s, plain = ranks_at_step_3(), ranks_at_step_3()
        hv = StackVerdicts(s).read(CollectStacks("stall", (0, 1), s.wall), hang_stacks(), "stacks/01-stall", fr)
        before = StackVerdicts(plain).read(CollectStacks("stall", (0, 1), plain.wall), hang_stacks(), "stacks/01-stall")
        assert (hv.text, hv.culprits, hv.waiting, hv.where) == (before.text, before.culprits, before.waiting,
                                                                before.where)
        assert hv.text.startswith("rank 1 is stuck in culprit_wait() at hang_ddp.py:30")


def test_a_silent_mismatch_in_the_history_is_added_to_the_stack_verdict_not_blamed_for_the_stall():
    s = ranks_at_step_3()
    hv = StackVerdicts(s).read(CollectStacks("stall", (0, 1), s.wall), hang_stacks(), "stacks/01-stall",
                               dumps("dtype_differs"))
    assert hv.text.startswith("rank 1 is stuck in culprit_wait() at hang_ddp.py:30") and hv.culprits == (1,)
    assert hv.text.endswith("; Flight Recorder: dtype mismatch at #5 (default group): all_reduce float32 on rank 0, "
                            "int32 on rank 1; every rank went through it: its result is wrong, no hang there")


def test_without_stacks_the_live_reports_lead_the_words():
    s = ranks_at_step_3()
    s.tracks[0].collectives = {"0": {"desc": "default_pg", "ranks": "[0, 1]", "enqueued": 9, "completed": 8,
                                     "frontier": {"seq": 9, "op": "all_reduce", "sizes": [[161]], "dtypes": ["Float"]}}}
    s.tracks[1].collectives = {"0": {"desc": "default_pg", "ranks": "[0, 1]", "enqueued": 8, "completed": 8,
                                     "frontier": None}}
    StackVerdicts(s).without_stacks((0, 1), s.wall)
    assert s.hang.culprits == (1,) and s.hang.waiting == (0,)
    assert re.match(r"collective #9 \(all_reduce, .*\): rank 0 entered it, rank 1 never did \(its last was #8\); "
                    r"ranks 0, 1 made no progress since", s.hang.text), s.hang.text


def test_an_xla_hang_verdict_says_it_has_no_flight_recorder():
    p = load_profile(ROOT / "profiles" / "xla-cpu.yaml", [])
    s = RunState(p, 1000.0, 1_764_682_000.0, runner=traits_of(p))
    s.begin(2, 1)
    StackVerdicts(s).without_stacks((0, 1), s.wall)
    assert s.hang.text.endswith("(PyTorch/XLA has no Flight Recorder)") and s.hang.collective == {}
    assert run_verdicts.xla_without_fr("t", True, None) == "t (PyTorch/XLA has no Flight Recorder: read from the stacks alone)"
