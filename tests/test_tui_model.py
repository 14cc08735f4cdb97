"""The UI run model: folding real runners.events into bounded per-rank state; plus the fake feed other UI tests use."""
from __future__ import annotations

import pytest

from ddptui.runners import events as ev
from ddptui.tui.model import LINES_PER_RANK, RunModel, grid_columns, human_bytes, node_grid_columns
from tests.support.scenes import T0, crash_scenario, hang_scenario, multinode_scenario

pytestmark = pytest.mark.any_python


def folded(batches) -> RunModel:
    m = RunModel()
    for b in batches:
        m.apply(b)
    return m


@pytest.mark.timeout(10)
def test_hang_scenario_folds_into_ranks_verdicts_and_timeline():
    m = folded(hang_scenario())
    assert m.rank_ids() == [0, 1]
    assert m.ranks[1].step == 3 and m.ranks[1].loss == pytest.approx(1 / 3 + 0.01)
    assert [p[0] for p in m.ranks[0].losses] == [1, 2, 3]
    assert m.ranks[0].pid == 5000 and m.ranks[0].cpu == 50.0 and m.ranks[1].rss == 101 << 20
    assert len(m.ranks[0].lines) == 3 and m.ranks[0].seq == 3
    assert [x[1] for x in m.timeline][-1] is None  # the launcher line, latest read
    walls = [x[0] for x in m.timeline]
    assert walls == sorted(walls)
    assert m.hang.culprits == (1,) and m.stacks.method[1] == "py-spy"
    assert m.finished.status == "stalled" and not m.live
    assert m.ranks[0].badge() == "killed"
    assert m.elapsed() == pytest.approx(10.0)


@pytest.mark.timeout(10)
def test_badges_for_exit_and_signal():
    m = folded(crash_scenario())
    assert m.ranks[1].badge() == "failed (exit 1)"
    assert m.ranks[0].badge() == "failed (SIGABRT)"
    m2 = RunModel()
    m2.apply([ev.RankState(0, "exited", "", T0), ev.ProcessExited("rank0", (0,), 0, None, T0)])
    assert m2.ranks[0].badge() == "exited ok"


@pytest.mark.timeout(10)
def test_buffers_stay_bounded_under_a_flood():
    m = RunModel()
    m.apply([ev.RunStarted("/r", "p", "env", 16, None, T0)])
    lines = tuple(f"line {i}" for i in range(1000))
    for k in range(10):
        m.apply([ev.LogLines(r, "out", T0 + k, k, lines) for r in range(16)])
    assert all(len(rv.lines) == LINES_PER_RANK for rv in m.ranks.values())
    assert m.ranks[3].seq == 10_000 and m.ranks[3].lines[-1][2] == "line 999"
    assert len(m.timeline) == m.timeline.maxlen and m.timeline_seq == 160_000


@pytest.mark.timeout(10)
def test_lines_of_one_batch_are_ordered_by_read_time():
    m = RunModel()
    m.apply([ev.LogLines(1, "out", T0 + 2, 2, ("late",)), ev.LogLines(0, "out", T0 + 1, 1, ("early",))])
    assert [x[3] for x in m.timeline] == ["early", "late"]


def test_grid_and_byte_helpers():  # which frames are collectives is the engine's: tests/test_verdict.py
    assert [grid_columns(n) for n in (1, 2, 4, 6, 9, 16, 20, 32)] == [1, 2, 2, 3, 3, 4, 5, 6]
    assert human_bytes(None) == "-" and human_bytes(300 << 20) == "300.0M"


@pytest.mark.timeout(10)
def test_a_progress_event_brings_every_loss_since_the_previous_one():
    m = folded([[ev.RunStarted("/runs/x", "p", "torchrun", 1, 9, T0),
                 ev.Progress(0, 3, 0.7, T0 + 1, "report", ((1, 0.9), (2, 0.8), (3, 0.7))),
                 ev.Progress(0, 5, 0.5, T0 + 2, "report", ((4, 0.6), (5, 0.5))),
                 ev.Progress(0, 6, 0.4, T0 + 3, "hook")]])  # an event without points still adds its loss
    assert list(m.ranks[0].losses) == [(1, 0.9), (2, 0.8), (3, 0.7), (4, 0.6), (5, 0.5), (6, 0.4)]
    assert m.ranks[0].loss == 0.4 and m.ranks[0].step == 6
    e = ev.from_json(ev.Progress(0, 5, 0.5, T0, "report", ((4, 0.6), (5, 0.5))).to_json())
    assert [tuple(p) for p in e.losses] == [(4, 0.6), (5, 0.5)]  # the record keeps them too (replay)


@pytest.mark.timeout(10)
def test_engine_thins_a_burst_of_loss_points_evenly():
    from ddptui.runners.judge.rank_track import POINTS_PER_EVENT, RankTrack
    t = RankTrack(0, 0.0)
    for s in range(1, 2001):
        t.saw_step(s, 1.0 / s, 1.0, 1.0)
    pts = t.take_new_losses()
    assert len(pts) == POINTS_PER_EVENT and pts[0][0] == 1 and pts[-1][0] == 2000
    assert max(b[0] - a[0] for a, b in zip(pts, pts[1:])) <= 5  # evenly spread, no gap
    assert t.take_new_losses() == ()


@pytest.mark.timeout(10)
def test_a_rank_that_reports_its_losses_owns_its_curve():
    from ddptui.runners.judge.rank_track import RankTrack
    t = RankTrack(0, 0.0)
    for s in (1, 2, 3):  # the script prints "step N loss X" before its first batched report is read
        t.saw_step(s, 1.0 / s, 1.0, 1.0)
    for s in (1, 2, 3, 4, 5):  # the report covers steps already drawn, then goes on
        t.saw_step(s, 1.0 / s + 1e-9, 2.0, 2.0, reported=True)
    for s in (4, 5, 6):  # printed lines no longer add points
        t.saw_step(s, 1.0 / s, 3.0, 3.0)
    t.saw_step(1, 0.2, 4.0, 4.0, reported=True)  # its own numbering restarts (a new epoch): still drawn
    assert [p[0] for p in t.losses] == [1, 2, 3, 4, 5, 1] and t.step == 6
    t2 = RankTrack(1, 0.0)
    for s in (1, 2, 1, 2):  # only printed lines: every one is drawn, as before
        t2.saw_step(s, 0.5, 1.0, 1.0)
    assert [p[0] for p in t2.losses] == [1, 2, 1, 2]


@pytest.mark.timeout(10)
def test_a_cleared_stall_leaves_the_model_and_a_slow_sample_never_replaces_the_stall_verdict():
    m = folded(hang_scenario()[:-1])  # stalled, stacks and verdict in; not finished
    stall_verdict = m.hang
    assert m.stall is not None and stall_verdict.reason == "stall"
    m.apply([ev.StallCleared((1,), T0 + 20)])
    assert m.stall is None and m.hang is stall_verdict  # the stall is over; its verdict stays for the Stacks tab
    slow = ev.HangVerdict("the run slowed down (rank 1's steps take 0.50 s, 100x its first 20 steps' 5.0 ms): "
                          "rank 1 is in main() at t.py:9 (calls time.sleep)", (1,), (0,), {}, T0 + 30,
                          "/runs/x-hang/stacks/2", "slow")
    m.apply([ev.StacksCollected({0: "py-spy", 1: "py-spy"}, {}, 0.1, "/runs/x-hang/stacks/2", T0 + 30, {}, "slow"),
             slow])
    assert m.hang is stall_verdict and m.slow is slow  # as the engine keeps them: hang from stalls only
    assert m.stacks_verdict() is slow


def test_stall_cleared_round_trips_through_the_record():
    from ddptui.runners.evidence.eventcheck import problem
    e = ev.StallCleared((0, 1), T0)
    back = ev.from_json(__import__("json").loads(__import__("json").dumps(e.to_json())))
    assert back == e and problem(back) is None
    assert problem(ev.from_json({"kind": "stall_cleared", "ranks": "1", "wall": T0})).startswith("stall_cleared.ranks")


@pytest.mark.timeout(10)
def test_lines_are_shown_as_the_engine_sent_them():
    from ddptui.runners.evidence import parse
    torn = '@ddptui {"k": "step", "r": 0'  # not a report (cut short): the engine shows it, so must the panes
    assert parse.report(torn) is None
    m = RunModel()
    m.apply([ev.RunStarted("/r", "p", "env", 1, None, T0), ev.LogLines(0, "out", T0, 0.0, ("a", torn))])
    assert [t for _, _, t in m.ranks[0].lines] == ["a", torn] and m.timeline[-1][3] == torn


@pytest.mark.timeout(10)
def test_the_model_says_what_each_batch_changed():
    m = RunModel()
    m.apply([ev.RunStarted("/r", "p", "env", 3, 10, T0)])
    c = m.take_changes()
    assert c.run and not c.lines and not c.loss
    assert not m.take_changes()  # taken: nothing left
    m.apply([ev.LogLines(2, "out", T0 + 1, 1.0, ("x",)), ev.Progress(1, 1, 0.5, T0 + 1, "hook")])
    c = m.take_changes()
    assert c.ranks == {1, 2} and c.lines and c.loss and not c.run
    m.apply([ev.Resources({0: 5.0}, {}, T0 + 2)])
    assert m.take_changes().ranks == {0}
    m.apply([ev.Progress(0, 2, None, T0 + 3, "hook")])  # a step without a loss: the chart has nothing new
    c = m.take_changes()
    assert c.ranks == {0} and not c.loss
    m.apply([ev.CrashVerdict("rank 0 died", 0, (), "exit 1", (), T0 + 4)])
    c = m.take_changes()
    assert c.run and not c.ranks
    merged = c.merge(m.take_changes()).merge(type(c)({4}, True, False, False))
    assert merged.ranks == {4} and merged.run and merged.lines and not merged.loss


# ---- nodes: where each rank runs, the job's state, a node lost --------------------------------------------------
@pytest.mark.timeout(10)
def test_ranks_are_grouped_by_node_once_two_nodes_said_hello():
    batches = multinode_scenario(cyclic=True)
    m = folded(batches[:1])
    assert m.grouped_rank_ids() == [0, 1, 2, 3] and m.columns() == 2 and m.nodes() == {"": [0, 1, 2, 3]}
    m.apply(batches[1])
    assert m.nodes() == {"node0": [0, 2], "node1": [1, 3]}
    assert m.grouped_rank_ids() == [0, 2, 1, 3] and m.columns() == 2  # a row per node
    assert [m.where(r) for r in range(4)] == ["node0", "node1", "node0", "node1"] and m.rank(2).pid == 7002


@pytest.mark.timeout(10)
def test_ranks_placed_one_by_one_keep_their_order_until_a_second_node_appears():
    m = folded(multinode_scenario(pending_only=True))
    m.apply([ev.RankHello(1, 11, "h", 4, T0 + 1, node="node0")])  # one node known: panes stay in rank order
    assert m.grouped_rank_ids() == [0, 1, 2, 3]
    m.apply([ev.RankHello(2, 12, "h", 4, T0 + 1, node="node1")])  # two: placed nodes first, the rest last
    assert m.grouped_rank_ids() == [1, 2, 0, 3] and m.columns() == grid_columns(4)


@pytest.mark.timeout(10)
def test_eight_nodes_start_a_row_each_or_share_rows_whole():
    m = folded(multinode_scenario(nodes=8, per=2))
    assert list(m.nodes()) == [f"node{n}" for n in range(8)] and m.columns() == 4  # two whole nodes a row
    assert node_grid_columns([2, 2, 2]) == 2  # 6 ranks: 3 columns would split a node across rows
    assert node_grid_columns([4, 4]) == 2 and node_grid_columns([6, 6]) == 3  # a node over rows, whole fractions
    assert node_grid_columns([1] * 8) == grid_columns(8) and node_grid_columns([3, 1]) == grid_columns(4)


@pytest.mark.timeout(10)
def test_an_old_record_without_nodes_places_ranks_by_host():
    m = folded(hang_scenario())  # RankHello as recorded before nodes: node ""
    assert m.where(0) == "host-a" and m.grouped_rank_ids() == [0, 1] and m.columns() == grid_columns(2)
    old = {k: v for k, v in ev.RankHello(0, 5, "host-b", 2, T0).to_json().items() if k != "node"}
    m.apply([ev.from_json(old)])
    assert m.rank(0).node == "" and m.where(0) == "host-b"


@pytest.mark.timeout(10)
def test_job_state_and_a_lost_node_are_kept_and_said_changed():
    batches = multinode_scenario(lost=True)
    m = folded(batches[:1])
    assert (m.job.state, m.job.reason, m.job.nodes) == ("PENDING", "Priority", ())
    m.take_changes()
    m.apply(batches[1])
    assert m.take_changes().run and m.job.state == "RUNNING" and m.job.nodes == ("node0", "node1")
    for b in batches[2:]:
        m.apply(b)
    assert [(n.node, n.ranks) for n in m.lost] == [("node1", (2, 3))]
    from ddptui.tui.widgets.banner import banner_text
    assert banner_text(m) == ("-crash", "NODE LOST node1 (ranks 2,3): the srun task on node1 exited (node unreachable)")


@pytest.mark.timeout(10)
def test_header_says_the_job_while_pending_and_panes_say_node_and_pid():
    from ddptui.tui.screens.run import head_text
    from ddptui.tui.widgets.rank_pane import pane_shown
    batches = multinode_scenario()
    m = folded(batches[:1])
    assert " · pending · job 12 PENDING (Priority) · " in head_text(m, "live").plain
    assert pane_shown(m.rank(0), m.steps).title == "rank 0"  # not placed yet
    m.apply(batches[1])
    head = head_text(m, "live").plain
    assert " · live · job 12 · " in head and "PENDING" not in head
    assert [pane_shown(m.rank(r), m.steps).title for r in (0, 3)] == ["rank 0 · pid 7000 · node0",
                                                                      "rank 3 · pid 7003 · node1"]
    m.apply([ev.JobState("12", "CANCELLED", "", ("node0", "node1"), T0 + 9)])
    assert " · job 12 CANCELLED · " in head_text(m, "live").plain
    old = folded(hang_scenario())  # a record older than nodes: the host
    assert pane_shown(old.rank(1), old.steps).title == "rank 1 · pid 5001 · host-a"


@pytest.mark.timeout(10)
def test_a_recorded_multinode_run_replays_with_its_nodes_job_and_lost_node(tmp_path):
    from ddptui.runners.edge.record import RunRecord, replay_events
    rec = RunRecord(tmp_path)
    for b in multinode_scenario(cyclic=True, lost=True):
        for e in b:
            if not isinstance(e, ev.LogLines):
                rec.event(e)
    rec.close()
    problems: list[str] = []
    m = folded([list(replay_events(tmp_path, problems))])
    assert [p.split(":")[0] for p in problems] == ["no summary.json"]  # it stops mid-run: only its end is missing
    assert m.nodes() == {"node0": [0, 2], "node1": [1, 3]} and m.job.nodes == ("node0", "node1")
    assert [(n.node, n.ranks) for n in m.lost] == [("node1", (1, 3))]
