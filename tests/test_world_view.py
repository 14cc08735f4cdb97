"""A ddptui that sees only part of the world (one node's torchrun agent of a multi-node job): ranks by their global
numbers, the others named unseen; the plan, the judge, the verdicts and the dashboard's model, without processes."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from ddptui.runners import events as ev
from ddptui.runners.evidence import fr_analysis
from ddptui.runners.evidence import hang_verdict
from ddptui.runners.evidence import replica
from ddptui.runners.launch import torchrun
from ddptui.runners.evidence.crash import RankEvidence, decide
from ddptui.runners.judge.judge import Judge, Launcher
from ddptui.runners.launch.profile.load import adhoc_profile
from ddptui.runners.evidence.rank_learn import RankLearner
from ddptui.runners.launch.torchrun_argv import max_nodes, node_rank, rdzv_backend
from ddptui.tui.console import Console
from ddptui.tui.model import RunModel

pytestmark = [pytest.mark.any_python, pytest.mark.timeout(30)]

T0, W0 = 1000.0, 1_764_682_000.0
C10D = ["torchrun", "--nnodes=2", "--nproc_per_node=1", "--rdzv-backend=c10d", "--rdzv-endpoint=node0:29400",
        "train.py"]


# ---- the command line and the plan ------------------------------------------------------------------------------
@pytest.mark.parametrize("argv,nodes,node,backend", [
    (C10D, 2, None, "c10d"),
    (["torchrun", "--nnodes", "1:4", "--rdzv_backend", "c10d", "t.py"], 4, None, "c10d"),
    (["torchrun", "--nnodes=2", "--node-rank=1", "--master-addr=h", "t.py"], 2, 1, "static"),
    (["torchrun", "--nnodes=2", "--node_rank", "0", "t.py"], 2, 0, "static"),
    (["torchrun", "--standalone", "t.py"], None, None, "static"),
])
def test_the_command_line_says_nodes_node_rank_and_rendezvous(argv, nodes, node, backend):
    assert (max_nodes(argv), node_rank(argv), rdzv_backend(argv)) == (nodes, node, backend)


def test_one_node_of_a_c10d_job_plans_its_ranks_as_a_guess_of_a_larger_world(tmp_path):
    p = adhoc_profile(C10D[:2] + ["--nproc_per_node=2"] + C10D[3:])
    plan = torchrun.plan(p, tmp_path, 0)
    assert plan.world_size == p.world_size == 4
    assert plan.ranks_here == (0, 1) and plan.procs[0].ranks == (0, 1)
    assert {s.rank for s in plan.sources} == {0, 1} and all(s.learn_rank for s in plan.sources)
    assert "ranks here: 2 of 4" in plan.describe()


def test_a_static_node_rank_numbers_the_ranks_at_plan_time(tmp_path):
    plan = torchrun.plan(adhoc_profile(["torchrun", "--nnodes=2", "--nproc-per-node=2", "--node-rank=1",
                                        "--master-addr=node0", "--master-port=29400", "t.py"]), tmp_path, 0)
    assert plan.world_size == 4 and plan.ranks_here == (2, 3)
    assert {s.rank for s in plan.sources} == {2, 3}


def test_a_single_node_command_is_the_whole_world(tmp_path):
    plan = torchrun.plan(adhoc_profile(["torchrun", "--standalone", "--nproc-per-node=2", "t.py"]), tmp_path, 0)
    assert plan.world_size == 2 and plan.ranks_here is None
    assert not any(s.learn_rank for s in plan.sources)


def test_the_learner_says_which_guess_its_hello_renumbered():
    learner = RankLearner()
    hello = "@ddptui " + json.dumps({"k": "hello", "r": 1, "world": 2, "pid": 7, "host": "h"})
    learner.feed("n0/0", 0, "err", ["a line before the hello"], 0.0)
    out = learner.feed("n0/0", 0, "out", [hello], 0.1)
    assert [r for r, _, _ in out] == [1, 1] and learner.take_renamed() == [(0, 1)]
    assert learner.take_renamed() == []


# ---- the judge --------------------------------------------------------------------------------------------------
def judge_of_node1(nproc: int = 1) -> Judge:
    """node1's ddptui of a 2-node c10d job: the plan guessed ranks 0.. for its agent; the hellos will say 1.. ."""
    p = adhoc_profile(["torchrun", "--nnodes=2", f"--nproc_per_node={nproc}", "--rdzv-backend=c10d",
                       "--rdzv-endpoint=node0:29400", "t.py"])
    j = Judge(p, T0, W0)
    j.begin(2 * nproc, 1, tuple(range(nproc)))
    return j


def at(j: Judge, dt: float) -> None:
    j.tick(T0 + dt, W0 + dt)


def hello(j: Judge, rank: int, pid: int, dt: float = 0.5, world: int = 2) -> list:
    at(j, dt)
    return j.lines(rank, "out", ["@ddptui " + json.dumps({"k": "hello", "r": rank, "pid": pid, "host": "h",
                                                          "node": "node1", "world": world})], W0 + dt, T0 + dt)


def digest(j: Judge, rank: int, dt: float) -> None:
    at(j, dt)
    rep = {"k": "digest", "r": rank, "source": "ddp", "params": [["w", "ab" * 16, [4], "torch.float32"]]}
    j.lines(rank, "out", ["@ddptui " + json.dumps(rep)], W0 + dt, T0 + dt)


def test_the_rank_is_filed_under_its_global_number_and_the_peer_named_unseen():
    j = judge_of_node1()
    moved = j.rank_learned(0, 1)
    assert [(e.was, e.rank) for e in moved if isinstance(e, ev.RankRenumbered)] == [(0, 1)]
    out = hello(j, 1, 4242)
    assert set(j.tracks) == {1} and j.tracks[1].pid == 4242
    unseen = [e for e in out if isinstance(e, ev.RankState) and e.status == "unseen"]
    assert [e.rank for e in unseen] == [0], out
    said = [ln for e in out if isinstance(e, ev.LogLines) and e.rank is None for ln in e.lines]
    assert any("watches rank 1 of a 2-rank job" in ln and "rank 0 runs on another node, unseen here" in ln
               for ln in said), said
    at(j, 2.0)
    j.lines(1, "out", ["step 3 loss 0.5"], W0 + 2, T0 + 2)
    assert j.tracks[1].step == 3
    digest(j, 1, 3.0)
    # torchrun's process ranks are the plan's: its exit ends the rank now numbered 1
    j.process_exited("torchrun", (0,), 99, 0, W0 + 4, launcher=True)
    at(j, 4.5)
    j.settle()
    out, status, code = j.conclude(None, None, [Launcher("torchrun", 0)])
    assert (status, code) == ("ok", 0)
    rep = next(e for e in out if isinstance(e, ev.ReplicaVerdict))
    assert rep.status == "incomplete" and "rank 1 is the only rank seen here" in rep.text, rep.text
    assert "all 1 ranks" not in rep.text
    summary = j.summary(status, code, "/r", 5.0, 0.1, [], [])
    assert summary["world_size"] == 2 and summary["unseen"] == [0] and list(summary["ranks"]) == [1]


def test_a_ddptui_that_sees_every_rank_renumbers_nothing():
    p = adhoc_profile(["torchrun", "--standalone", "--nproc_per_node=2", "t.py"])
    j = Judge(p, T0, W0)
    j.begin(2, 1)
    assert j.rank_learned(0, 1) == [] and set(j.tracks) == {0, 1}
    out = hello(j, 1, 11) + hello(j, 0, 10)
    assert not [e for e in out if isinstance(e, ev.RankState) and e.status == "unseen"]
    assert j.summary("ok", 0, "/r", 1.0, 0.1, [], [])["unseen"] == []


def test_two_local_ranks_of_the_second_node_are_ranks_2_and_3():
    j = judge_of_node1(nproc=2)
    for guess, rank, pid in ((0, 2, 20), (1, 3, 30)):
        j.rank_learned(guess, rank)
        out = hello(j, rank, pid, world=4)
    assert set(j.tracks) == {2, 3} and {j.tracks[r].pid for r in (2, 3)} == {20, 30}
    assert sorted(e.rank for e in out if isinstance(e, ev.RankState) and e.status == "unseen") == [0, 1]


def test_a_peer_gone_on_an_unseen_node_is_not_the_local_victims_crash():
    j = judge_of_node1()
    j.rank_learned(0, 1)
    hello(j, 1, 4242)
    at(j, 2.0)
    j.lines(1, "out", ["@ddptui " + json.dumps({"k": "exc", "r": 1, "type": "RuntimeError", "where": "train.py:9",
                                                "msg": "Connection closed by peer [10.0.0.1]:4000", "tb": []})],
            W0 + 2, T0 + 2)
    j.deaths([(4242, W0 + 2.1, 1)], own=set())
    j.process_exited("torchrun", (0,), 99, 1, W0 + 2.5, launcher=True)
    at(j, 3.0)
    j.settle()
    _, status, _ = j.conclude(None, None, [Launcher("torchrun", 1)])
    c = j.crash
    assert status == "failed" and c.root_rank is None and c.victims == (1,), c
    assert c.text.startswith("rank 1 failed because a peer went away (Connection closed by peer); "
                             "rank 0 runs on another node, unseen here: the cause is there"), c.text
    assert "failed first" not in c.text
    assert c.outcomes[1].startswith("failed after an unseen peer went away")


# ---- the verdicts over a partial world (pure) ---------------------------------------------------------------------
def test_replicas_of_part_of_the_world_are_never_all_identical():
    same = ["w", "ab" * 16, [4], "torch.float32"]
    res = replica.compare({0: [same], 1: [same]}, 4, unseen=(2, 3))
    assert res.status == "incomplete" and res.text.startswith("2 of 4 ranks seen here (0, 1) hold byte-identical")
    assert "ranks 2, 3 run on other nodes, unseen here: not compared" in res.text
    assert replica.compare({0: [same], 1: [same]}, 2).status == "identical"


def test_a_crash_of_a_rank_with_its_own_error_stays_the_root_of_the_ranks_seen_here():
    v = decide([RankEvidence(1, 1, died_at=5.0, error_at=5.0, exc={"type": "ValueError", "msg": "bad", "where": "t:1"})],
               unseen=(0,))
    assert v.root == 1 and v.text.startswith("rank 1 failed first of the ranks seen here (exit 1): ValueError: bad")
    assert v.text.endswith("; rank 0 runs on another node, unseen here")


def test_the_collective_finding_names_an_unseen_peer_as_unseen():
    dump = {"pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1]"}},
            "pg_status": {"0": {"last_enqueued_collective": 11, "last_completed_collective": 10}},
            "entries": [{"process_group": ["0", "default_pg"], "collective_seq_id": 11, "profiling_name": "gloo:all_reduce",
                         "input_sizes": [[161]], "input_dtypes": ["Float"], "state": "scheduled"}]}
    f = fr_analysis.analyse({1: dump}, 2, unseen=(0,))
    assert f.kind == "missing" and f.absent == (0,), f
    text = f.sentence()
    assert "rank 1 entered it" in text and "rank 0 runs on another node, unseen here" in text, text
    assert "no Flight Recorder dump from rank 0" not in text


def test_a_stall_whose_ranks_here_all_wait_names_the_unseen_ranks_as_where_the_cause_may_be():
    w = hang_verdict.Where("collective", "all_reduce inside backward (DDP bucket all-reduce)", "train_step",
                           "train.py", 12)
    text, culprits, waiting = hang_verdict.hang_sentence({1: w}, {1: 5}, [1], W0, unseen=(0,))
    assert waiting == (1,) and culprits == ()
    assert text.startswith("rank 1 waits in all_reduce") and "no rank seen here is outside it" in text, text
    assert text.endswith("rank 0 runs on another node, unseen here: the rank holding the others up may be there")


# ---- the front ends ---------------------------------------------------------------------------------------------
def test_the_dashboard_moves_a_renumbered_pane_and_shows_the_unseen_rank():
    m = RunModel()
    m.apply([ev.RunStarted("/r", "adhoc", "torchrun", 2, None, W0, here=1),
             ev.ProcessStarted("torchrun", 99, (0,), W0),
             ev.Resources({0: 12.0}, {0: 1 << 20}, W0 + 0.5)])
    m.apply([ev.RankRenumbered(0, 1, W0 + 1), ev.RankHello(1, 4242, "h", 2, W0 + 1, node="node1"),
             ev.RankState(0, "unseen", "runs on another node", W0 + 1)])
    assert m.ranks[1].pid == 4242 and m.ranks[1].cpu == 12.0 and m.ranks[1].rank == 1
    assert m.ranks[0].status == "unseen" and m.ranks[0].pid is None and m.ranks[0].cpu is None
    assert m.rank_ids() == [0, 1]


def test_the_console_summary_counts_the_ranks_seen_and_lists_the_unseen(tmp_path):
    out = (tmp_path / "o").open("w+")
    c = Console(out, color=False)
    summary = {"profile": "adhoc", "runner": "torchrun", "world_size": 2, "unseen": [0], "status": "ok",
               "ranks": {"1": {"status": "exited", "returncode": 0, "steps": 30, "node": "node1", "pid": 7}}}
    c.handle([ev.RunFinished("ok", 0, "/r/summary.json", W0, summary)])
    out.seek(0)
    text = out.read()
    assert "(torchrun, 1 of 2 ranks seen here)" in text, text
    rows = [ln.split() for ln in text.splitlines() if ln.strip()[:1].isdigit()]
    assert [r[:1] for r in rows] == [["0"], ["1"]] and rows[0][3] == "unseen" and rows[1][1] == "node1", rows


def test_the_dashboard_panes_say_the_global_rank_and_the_unseen_one():
    import asyncio

    from ddptui.tui.app import DdpApp
    from ddptui.tui.widgets.rank_pane import RankPane
    from tests.support.ui import SIZE, ScriptSource, settle

    summary = {"profile": "adhoc", "runner": "torchrun", "world_size": 2, "unseen": [0], "status": "ok", "ranks": {}}
    batches = [[ev.RunStarted("/r", "adhoc", "torchrun", 2, None, W0, here=1),
                ev.ProcessStarted("torchrun", 99, (0,), W0)],
               [ev.RankRenumbered(0, 1, W0 + 1), ev.RankHello(1, 4242, "h", 2, W0 + 1, node="node1"),
                ev.RankState(0, "unseen", "runs on another node, not watched by this ddptui", W0 + 1),
                ev.Progress(1, 5, 0.5, W0 + 2, "hook"), ev.RankState(1, "exited", "exit 0", W0 + 3)],
               [ev.RunFinished("ok", 0, "/r/summary.json", W0 + 4, summary)]]

    async def body():
        app = DdpApp(source=ScriptSource(batches))
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot, app)
            await pilot.press("escape")  # from the tab the end opened back to the panes
            await pilot.pause()
            one, zero = (app.screen.query_one(f"#rank-{r}", RankPane) for r in (1, 0))
            assert "rank 1" in str(one.border_title) and "node1" in str(one.border_title), one.border_title
            assert "exited" in str(one.border_subtitle)
            assert "unseen" in str(zero.border_subtitle), zero.border_subtitle
            assert "4242" not in str(zero.border_title) and "99" not in str(zero.border_title)
    asyncio.run(body())
