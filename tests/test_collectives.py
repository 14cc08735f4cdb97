"""The live collectives grid's decisions (runners/evidence/collectives.py) and how the judge reads the ranks' "coll" reports:
merged per group, one CollectiveProgress per engine turn, laggards named, and never a sign of life for the stall
clock. Fake clock, hand-written report lines in the shape runners/inject sends."""
from __future__ import annotations

import pytest

import json

from ddptui.runners.evidence import collectives as co
from ddptui.runners import events as ev
from ddptui.runners.edge.record import event_line
from ddptui.runners.evidence.eventcheck import problem

from tests.support.judge import T0, W0, at, hello, make, of, say

pytestmark = pytest.mark.any_python


def pg(enq, comp, frontier=None, ranks="[0, 1]", desc="default_pg"):
    """One group as a rank reports it: Flight Recorder's numbers are strings, its members pg_config's string."""
    return {"desc": desc, "ranks": ranks, "enqueued": str(enq), "completed": str(comp), "frontier": frontier}


def coll(rank: int, **pgs) -> str:
    return "@ddptui " + json.dumps({"k": "coll", "r": rank, "pgs": {k.lstrip("_"): v for k, v in pgs.items()}})


FR = {"seq": 57, "op": "all_reduce", "sizes": [[1024]], "dtypes": ["Float"]}


# ---- the pure rules ----------------------------------------------------------------------------------------------
def test_entry_normalises_flight_recorders_strings():
    e = co.entry(pg("57", "56", FR))
    assert e == {"desc": "default_pg", "ranks": [0, 1], "enqueued": 57, "completed": 56, "frontier": FR}
    assert co.entry({"ranks": [1, 0], "enqueued": -1})["ranks"] == [0, 1]
    assert co.entry("junk") is None and co.entry({"enqueued": "x"})["enqueued"] == -1


def test_merge_keeps_the_groups_a_report_leaves_out_and_says_whether_anything_changed():
    cur: dict = {}
    assert co.merge(cur, {"0": pg(3, 3), "1": pg(1, 1, ranks="[0]", desc="sub")})
    before = cur["0"]
    assert co.merge(cur, {"1": pg(2, 2, ranks="[0]", desc="sub")}) and cur["0"] is before
    assert not co.merge(cur, {"1": pg(2, 2, ranks="[0]", desc="sub")})  # the same numbers again: no change
    assert not co.merge(cur, None)


def by(**ranks) -> dict:
    return {int(r.lstrip("r")): {name: co.entry(raw) for name, raw in groups.items()} for r, groups in ranks.items()}


def test_a_rank_that_never_entered_the_collective_others_wait_in_is_the_laggard():
    grid = by(r0={"0": pg(57, 56, FR)}, r1={"0": pg(56, 56)}, r2={"0": pg(57, 56, FR, ranks="[0, 1, 2]")})
    assert co.lagging(grid) == {"0": {1}} and co.laggards(grid) == (1,)
    rows = co.rows(grid)
    assert [(r.rank, r.state, r.pending) for r in rows] == [
        (0, "waiting", "#57 all_reduce [1024] Float"), (1, "behind", ""), (2, "waiting", "#57 all_reduce [1024] Float")]
    assert rows[1].behind_of == 57 and rows[0].group == "default_pg (2 ranks)"


def test_numbers_apart_only_by_each_ranks_moment_name_nobody():
    """A healthy run: every rank looks at its own moment, so their numbers differ, and one is even inside a
    collective at its look; nothing has stayed pending across two looks (no frontier), so nobody lags."""
    grid = by(r0={"0": pg(120, 119)}, r1={"0": pg(96, 96)})
    assert co.lagging(grid) == {} and co.laggards(grid) == ()
    assert [r.state for r in co.rows(grid)] == ["ok", "ok"]


def test_a_rank_behind_in_a_subgroup_only_is_a_laggard_there_and_a_rank_without_the_group_is_behind_in_it():
    sub = {"seq": 4, "op": "all_reduce", "sizes": [[8]], "dtypes": ["Float"]}
    grid = by(r0={"0": pg(9, 9, ranks="[0, 1, 2]"), "1": pg(4, 3, sub, ranks="[0, 2]", desc="")},
              r1={"0": pg(9, 9, ranks="[0, 1, 2]")},
              r2={"0": pg(9, 9, ranks="[0, 1, 2]"), "1": pg(3, 3, ranks="[0, 2]", desc="")})
    assert co.lagging(grid) == {"1": {2}} and co.laggards(grid) == (2,)
    rows = {(r.rank, r.pg): r for r in co.rows(grid)}
    assert rows[(2, "1")].state == "behind" and rows[(2, "0")].state == "ok" and rows[(1, "0")].state == "ok"
    assert rows[(0, "1")].group == "group 1 (2 ranks)" and rows[(0, "1")].state == "waiting"
    assert co.group_label("2", co.entry(pg(0, 0, ranks="[1, 3]", desc="undefined"))) == "group 2 (2 ranks)"
    # rank 2 has not made the subgroup's collectives at all yet: behind in it as well
    del grid[2]["1"]
    assert co.lagging(grid) == {"1": {2}}
    # a rank outside the group that files numbers under its name (Flight Recorder keys pg_status by the rank's own
    # group id: on ranks 2, 3 of new_group([0, 1]) and new_group([2, 3]), their pair's numbers come as '1') is no member
    grid[1]["1"] = co.entry(pg(0, 0, ranks="[]", desc=""))
    grid[2]["1"] = co.entry(pg(4, 3, sub, ranks="[0, 2]", desc=""))
    assert co.lagging(grid) == {} and co.laggards(grid) == ()


def test_a_mismatch_both_ranks_waiting_at_the_same_seq_is_no_laggard():
    grid = by(r0={"0": pg(10, 9, {"seq": 10, "op": "barrier", "sizes": [], "dtypes": []})},
              r1={"0": pg(10, 9, {"seq": 10, "op": "all_reduce", "sizes": [[72]], "dtypes": ["Float"]})})
    assert co.laggards(grid) == ()
    assert [r.pending for r in co.rows(grid)] == ["#10 barrier", "#10 all_reduce [72] Float"]


def test_rows_trust_the_engines_laggards():
    grid = by(r0={"0": pg(57, 56, FR)}, r1={"0": pg(56, 56)})
    assert [r.state for r in co.rows(grid, laggard_ranks=())] == ["waiting", "ok"]
    assert [r.state for r in co.rows(grid, laggard_ranks=(1,))] == ["waiting", "behind"]


# ---- the judge -------------------------------------------------------------------------------------------------
def test_coll_reports_make_one_collective_progress_per_turn_with_the_changed_ranks_and_the_laggards():
    j = make()
    for r in (0, 1):
        hello(j, r)
    say(j, 0, 2.0, coll(0, _0=pg(5, 5)))
    say(j, 1, 2.0, coll(1, _0=pg(5, 5)))
    outs = j.lines(0, "out", [coll(0, _0=pg(6, 5))], W0 + 2.1, T0 + 2.1)
    assert of(outs, ev.LogLines) == [] and of(outs, ev.CollectiveProgress) == []  # coalesced until the turn ends
    cp = of(j.progress(), ev.CollectiveProgress)
    assert len(cp) == 1 and set(cp[0].by_rank) == {0, 1} and cp[0].laggards == () and cp[0].wall == W0 + 2.1
    assert cp[0].by_rank[0]["0"]["enqueued"] == 6 and cp[0].by_rank[1]["0"]["completed"] == 5
    assert of(j.progress(), ev.CollectiveProgress) == []  # nothing new: nothing sent
    FR6 = dict(FR, seq=6)  # rank 0 waits in #6 across two of its looks; rank 1 never enqueued it
    say(j, 0, 4.1, coll(0, _0=pg(6, 5, FR6)))
    cp = of(j.progress(), ev.CollectiveProgress)
    assert len(cp) == 1 and set(cp[0].by_rank) == {0} and cp[0].laggards == (1,)
    assert cp[0].by_rank[0]["0"]["frontier"] == FR6
    back = ev.from_json(json.loads(json.dumps(cp[0].to_json())))  # the record's round trip (events.jsonl, replay)
    assert back == cp[0] and problem(back) is None
    say(j, 1, 5.0, coll(1, _0=pg(6, 6)))
    say(j, 0, 5.0, coll(0, _0=pg(6, 6)))
    assert of(j.progress(), ev.CollectiveProgress)[0].laggards == ()


def test_a_hung_rank_whose_threads_still_send_coll_reports_stalls_on_time():
    """The ranks' collectives thread and debug server keep talking while the main thread hangs: neither is output."""
    j = make("stall_after=10", "startup_grace=1")
    for r in (0, 1):
        hello(j, r, 0.0)
        say(j, r, 1.0, "epoch 1 step 1 loss 0.9")
    for dt in (3.0, 5.0, 7.0, 9.0, 10.5):
        say(j, 1, dt, coll(1, _0=pg(int(dt), int(dt) - 1)),
            "@ddptui " + json.dumps({"k": "debug_server", "r": 1, "path": "/tmp/ddptui-0/ab/r1.sock"}))
    say(j, 0, 10.5, "epoch 1 step 2 loss 0.8")
    at(j, 11.5)
    stall = of(j.check(), ev.StallDetected)
    assert stall and stall[0].stalled == (1,) and stall[0].since == W0 + 1.0


def test_the_debug_servers_listening_line_is_shown_but_is_no_sign_of_life():
    """torch prints a line when the debug server ddptui started listens: a rank that hangs before its first step
    must keep its stall clock at its own last line (a rank's `startup_grace` was lost to stall_after without this)."""
    j = make("stall_after=10", "startup_grace=1")
    for r in (0, 1):
        hello(j, r, 0.0)
    say(j, 0, 2.0, "loading data")
    own = ("[rank0]:[W1203 17:12:06.188601986 WorkerServer.cpp:113] [c10d] Server listening to UNIX "
           "/tmp/ddptui-0/1a2b3c4d/r0.sock")
    out = say(j, 0, 4.0, own)
    assert j.tracks[0].last_progress == T0 + 2.0
    assert any(own in e.lines for e in of(out, ev.LogLines))  # still in the rank's log
    users = own.replace("/tmp/ddptui-0/1a2b3c4d", "/home/me/debug")  # the user's own server: their output
    say(j, 0, 5.0, users)
    assert j.tracks[0].last_progress == T0 + 5.0


def test_a_coll_report_beside_a_real_line_still_counts_the_line():
    j = make("stall_after=10", "startup_grace=1")
    for r in (0, 1):
        hello(j, r, 0.0)
    say(j, 1, 8.0, coll(1, _0=pg(1, 1)), "loading shard 3")
    assert j.tracks[1].last_progress == T0 + 8.0


# ---- issue 23 item 9: ranks pending in different calls are a mismatch, live and marked ------------------------------
BARRIER11 = {"seq": 11, "op": "barrier", "sizes": [], "dtypes": []}
AR11 = {"seq": 11, "op": "all_reduce", "sizes": [[161]], "dtypes": ["Float"]}


def test_a_conflict_is_two_members_pending_at_one_collective_in_different_calls():
    assert co.conflict(by(r0={"0": pg(11, 10, BARRIER11)}, r1={"0": pg(11, 10, AR11)}))
    assert not co.conflict(by(r0={"0": pg(11, 10, AR11)}, r1={"0": pg(11, 10, AR11)}))  # the same call: no mismatch
    assert not co.conflict(by(r0={"0": pg(57, 56, FR)}, r1={"0": pg(56, 56)}))  # a laggard is not a mismatch
    # one rank's frontier from before it completed: not pending, nothing to compare
    assert not co.conflict(by(r0={"0": pg(11, 11, BARRIER11)}, r1={"0": pg(11, 10, AR11)}))


def test_rows_mark_the_sides_of_the_engines_mismatch_and_the_ranks_it_names_missing():
    grid = by(r0={"0": pg(11, 10, BARRIER11)}, r1={"0": pg(11, 10, AR11)})
    assert [r.state for r in co.rows(grid, ())] == ["waiting", "waiting"]  # before: nothing said they disagree
    mm = {"kind": "op mismatch", "pg": "0", "seq": 11, "sides": {"0": {"op": "barrier"}, "1": {"op": "all_reduce"}}}
    assert [r.state for r in co.rows(grid, (), mm)] == ["mismatch", "mismatch"]
    grid = by(r0={"0": pg(16, 15, FR)}, r1={"0": pg(15, 15)})
    missing = {"kind": "missing", "pg": "0", "seq": 16, "missing": [1], "sides": {}}
    rows = co.rows(grid, (), missing)  # the verdict's finding, before the laggard rule's two looks named rank 1
    assert [(r.state, r.behind_of) for r in rows] == [("waiting", None), ("behind", 16)]


def test_the_engine_says_a_live_mismatch_with_its_fix_and_drops_it_once_the_calls_agree():
    j = make()
    for r in (0, 1):
        hello(j, r)
    say(j, 0, 2.0, coll(0, _0=pg(11, 10, BARRIER11)))
    say(j, 1, 2.0, coll(1, _0=pg(11, 10)))
    assert of(j.progress(), ev.CollectiveProgress)[0].mismatch == {}  # rank 1's call not known yet
    say(j, 1, 4.0, coll(1, _0=pg(11, 10, AR11)))
    (cp,) = of(j.progress(), ev.CollectiveProgress)
    assert cp.mismatch["kind"] == "op mismatch" and cp.mismatch["seq"] == 11 and cp.laggards == ()
    assert cp.mismatch["sentence"].startswith("ranks disagree at collective #11 in the default group: rank 0 called "
                                              "barrier, rank 1 all_reduce [161]")
    assert cp.mismatch["fix"].startswith("every rank must call the same collectives in the same order; the barrier "
                                         "runs on rank 0 only")
    back = ev.from_json(json.loads(json.dumps(cp.to_json())))
    assert problem(back) is None and back.mismatch["kind"] == "op mismatch"
    say(j, 0, 6.0, coll(0, _0=pg(12, 12)))
    say(j, 1, 6.0, coll(1, _0=pg(12, 12)))
    assert of(j.progress(), ev.CollectiveProgress)[0].mismatch == {}


def test_the_records_collectives_line_holds_each_groups_members_once_and_reads_back_whole():
    world = list(range(1024))
    by_rank = {r: {"0": {"desc": "default_pg", "ranks": list(world), "enqueued": 7, "completed": 6, "frontier": None},
                   "1": {"desc": "tp", "ranks": [r - r % 2, r - r % 2 + 1], "enqueued": 3, "completed": 3,
                         "frontier": None}} for r in range(0, 1024, 4)}
    by_rank[0]["2"] = {"desc": "", "ranks": [], "enqueued": 0, "completed": 0, "frontier": None}
    e = ev.CollectiveProgress(by_rank, (1,), W0, {})
    line = json.dumps(e.to_json())
    assert len(line) < 60_000 and line.count(json.dumps(world)) == 1  # inline, it was 1.3 MB: the world once per rank
    back = event_line(line)
    assert back == e and problem(back) is None and back.by_rank[4]["0"]["ranks"] == world
    assert back.by_rank[8]["1"]["ranks"] == [8, 9]  # a group name with other members on other ranks keeps its own
    # a record written before `members` (each entry its own list) reads as it did
    old = json.dumps({**{k: v for k, v in e.to_json().items() if k != "members"}, "by_rank": by_rank})
    assert event_line(old) == e
    bad = json.loads(line)
    bad["by_rank"]["4"]["0"]["ranks"] = "9"
    assert event_line(json.dumps(bad)) == "collectives: by_rank: ranks '9' names no group of members"
    assert event_line(json.dumps({**json.loads(line), "members": [1]})).startswith("collectives: members: expected")
