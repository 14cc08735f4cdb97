"""The UI run model: folding real runners.events into bounded per-rank state; plus the fake feed other UI tests use."""
from __future__ import annotations

import pytest

from ddptui.runners import events as ev
from ddptui.tui.model import LINES_PER_RANK, RunModel, grid_columns, human_bytes

T0 = 1_700_000_000.0


def hang_scenario(world: int = 2, steps: int = 10) -> list[list[ev.Event]]:
    """Batches of a 2-rank run where rank 1 sleeps at step 3 and rank 0 waits in all_reduce."""
    t = T0
    b: list[list[ev.Event]] = [[
        ev.RunStarted("/runs/x-hang", "hang", "torchrun", world, steps, t),
        ev.ProcessStarted("torchrun", 4242, tuple(range(world)), t),
    ]]
    b.append([ev.RankHello(r, 5000 + r, "host-a", world, t + 0.5) for r in range(world)]
             + [ev.RankState(r, "running", "", t + 0.5) for r in range(world)])
    for s in range(1, 4):
        b.append([ev.LogLines(r, "out", t + s, s, (f"[rank {r}] step {s} loss {1.0 / s:.3f}",)) for r in range(world)]
                 + [ev.Progress(r, s, 1.0 / s + 0.01 * r, t + s, "hook") for r in range(world)])
    b.append([ev.LogLines(None, "err", t + 3.5, 3.5, ("W torchrun: some launcher warning",)),
              ev.Resources({r: 50.0 + r for r in range(world)}, {r: (100 + r) << 20 for r in range(world)}, t + 4),
              ev.HintRaised("gloo-timeout", "Collective timeout", "A rank stopped calling the collective.",
                            "Find the rank that is elsewhere (stacks view).", 0, "gloo timeout", t + 4)])
    b.append([ev.StallDetected((1,), (), t + 3, 5.0, t + 8), ev.RankState(1, "stalled", "no step for 5s", t + 8),
              ev.RankState(0, "stalled", "waiting in all_reduce", t + 8)])
    threads = {
        0: [{"thread": "MainThread", "idle": False, "frames": [
            ["<module>", "/w/hang_ddp.py", 60], ["backward", "/venv/torch/_tensor.py", 521],
            ["all_reduce", "/venv/torch/distributed/distributed_c10d.py", 2200]]}],
        1: [{"thread": "MainThread", "idle": False, "frames": [
            ["<module>", "/w/hang_ddp.py", 58], ["culprit_wait", "/w/hang_ddp.py", 31]]},
            {"thread": "Thread-2", "idle": True, "frames": [["run", "/usr/lib/python3.11/threading.py", 975]]}],
    }
    b.append([ev.StacksCollected({0: "py-spy", 1: "py-spy"}, threads, 0.42, "/runs/x-hang/stacks/1", t + 9),
              ev.HangVerdict("rank 1 is in culprit_wait (hang_ddp.py:31) at step 3 while rank 0 waits in all_reduce",
                             (1,), (0,), {1: {"category": "sleep", "func": "culprit_wait", "file": "/w/hang_ddp.py",
                                              "line": 31, "code": "time.sleep(600)", "step": 3},
                                          # as runners.hang_verdict.classify(rank 0's threads).to_dict(3) says
                                          0: {"category": "collective", "detail": "all_reduce", "func": "all_reduce",
                                              "file": "/venv/torch/distributed/distributed_c10d.py", "line": 2200,
                                              "code": "", "thread": "MainThread", "calls": None, "worker": None,
                                              "step": 3}}, t + 9,
                             path="/runs/x-hang/stacks/1")])
    b.append([ev.RankState(r, "killed", "stopped after the stall", t + 10) for r in range(world)]
             + [ev.ProcessExited("torchrun", tuple(range(world)), -15, "SIGTERM", t + 10),
                ev.ReplicaVerdict("unavailable", "no digests (run stopped)", None, (), (), {}, t + 10),
                ev.RunFinished("stalled", 3, "/runs/x-hang/summary.json", t + 10, {"status": "stalled"})])
    return b


def crash_scenario() -> list[list[ev.Event]]:
    t = T0
    return [
        [ev.RunStarted("/runs/x-crash", "crash", "torchrun", 2, 10, t),
         ev.RankState(0, "running", "", t), ev.RankState(1, "running", "", t)],
        [ev.LogLines(1, "err", t + 1, 1, ("Traceback (most recent call last):", "RuntimeError: injected crash on rank 1 at step 2"))],
        [ev.RankState(1, "failed", "exit 1", t + 2), ev.ProcessExited("rank1", (1,), 1, None, t + 2),
         ev.RankState(0, "failed", "SIGABRT", t + 2.5), ev.ProcessExited("rank0", (0,), -6, "SIGABRT", t + 2.5),
         ev.CrashVerdict("rank 1 raised RuntimeError: injected crash on rank 1 at step 2 (ddp_mlp.py:88)", 1, (0,),
                         "exit 1", ("  File \"ddp_mlp.py\", line 88, in main", "RuntimeError: injected crash on rank 1 at step 2"), t + 3),
         ev.RunFinished("failed", 1, "/runs/x-crash/summary.json", t + 3, {})],
    ]


def diverge_scenario() -> list[list[ev.Event]]:
    t = T0
    params = ("net.0.weight", "net.0.bias", "net.2.weight")
    same = ("aa11bb22cc33dd44", "ee55ff6600112233", "4455667788990011")
    return [
        [ev.RunStarted("/runs/x-div", "diverge", "env", 3, 5, t)]
        + [ev.Progress(r, 5, 0.5, t + 1, "hook") for r in range(3)],
        [ev.ReplicaVerdict("differ", "rank 2 differs from the majority at net.0.bias", "net.0.bias", (2,), params,
                           {0: same, 1: same, 2: (same[0], "deadbeefdeadbeef", "0000000000000000")}, t + 2),
         ev.RunFinished("replicas differ", 4, "/runs/x-div/summary.json", t + 2, {})]
        + [ev.ProcessExited(f"rank{r}", (r,), 3 if r == 2 else 0, None, t + 2) for r in range(3)]
        + [ev.RankState(r, "exited" if r != 2 else "failed", "", t + 2) for r in range(3)],
    ]


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
    from ddptui.runners.rank_track import POINTS_PER_EVENT, RankTrack
    t = RankTrack(0, 0.0)
    for s in range(1, 2001):
        t.saw_step(s, 1.0 / s, 1.0, 1.0)
    pts = t.take_new_losses()
    assert len(pts) == POINTS_PER_EVENT and pts[0][0] == 1 and pts[-1][0] == 2000
    assert max(b[0] - a[0] for a, b in zip(pts, pts[1:])) <= 5  # evenly spread, no gap
    assert t.take_new_losses() == ()


@pytest.mark.timeout(10)
def test_a_rank_that_reports_its_losses_owns_its_curve():
    from ddptui.runners.rank_track import RankTrack
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
    from ddptui.runners.eventcheck import problem
    e = ev.StallCleared((0, 1), T0)
    back = ev.from_json(__import__("json").loads(__import__("json").dumps(e.to_json())))
    assert back == e and problem(back) is None
    assert problem(ev.from_json({"kind": "stall_cleared", "ranks": "1", "wall": T0})).startswith("stall_cleared.ranks")


@pytest.mark.timeout(10)
def test_lines_are_shown_as_the_engine_sent_them():
    from ddptui.runners import parse
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
