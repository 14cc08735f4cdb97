"""Slow and stalled verdicts a loaded machine must not make, with a fake clock: a straggler is judged at one moment of
the ranks' own clocks, never from counts read at different moments, and a job whose ranks share a collective every
step has none (runners/judge/rank_track.py, runners/evidence/lockstep.py); a slow verdict that no longer holds is said to be over;
every rank slowed on an overloaded machine is the machine's unless one rank is caught twice; a rank's CPU evidence
survives the switch from its launcher's pid to its own."""
from __future__ import annotations

import pytest

import json
from pathlib import Path

from ddptui.runners import events as ev
from ddptui.runners.judge.judge import CollectStacks, Judge
from ddptui.runners.evidence.lockstep import step_bound
from ddptui.runners.launch.profile.load import load_profile
from ddptui.runners.judge.rank_track import RankTrack, aligned_steps, find_slow

pytestmark = pytest.mark.any_python

ROOT = Path(__file__).resolve().parent.parent
T0, W0 = 1000.0, 1_764_682_000.0
STEP = 0.012  # 4 ranks on 2 cores: ~12 ms a step


def make(world: int = 4) -> Judge:
    j = Judge(load_profile(ROOT / "profiles" / "cpu-ddp.yaml", [f"nproc={world}", "steps=1500", "stall_after=100"]),
              T0, W0)
    j.begin(world, 1)
    return j


def report(j: Judge, rank: int, first: int, last: int, start: float, dt: float, read: float, wall=None,
           **extra) -> None:
    """One batched progress line of a rank, as ddptui_report flushes it: steps first..last, the rank's monotonic
    clock at its last step (`at`, step n counted at start + n * dt) and each step's duration; read at engine time
    T0 + read."""
    at = [last, start + last * dt] + ([wall(last)] if wall else [])
    body = {"k": "loss", "r": rank, "steps": [[s, 1.0 / s] for s in range(first, last + 1)], "at": at,
            "dt": [dt] * (last - first + 1), **extra}
    j.tick(T0 + read, W0 + read)
    j.lines(rank, "out", ["@ddptui " + json.dumps(body)], W0 + read, T0 + read)


def flushes(j: Judge, rank: int, last: int, start: float, dt: float, read: float, every: int = 8, first: int = 1,
            wall=None) -> None:
    """A rank's steps first..last in lines of `every` steps (a flush every ~0.1 s), all read at T0 + read."""
    for a in range(first, last + 1, every):
        report(j, rank, a, min(a + every - 1, last), start, dt, read, wall)


def check(j: Judge, read: float) -> list:
    j.tick(T0 + read, W0 + read)
    return j.check()


def slow_states(outs) -> list:
    return [(o.rank, o.status, o.detail) for o in outs if isinstance(o, ev.RankState)]


def test_lock_stepped_ranks_whose_reports_were_flushed_at_different_steps_are_not_stragglers():
    """The issue's case: 4 ranks stepping together every 12 ms; ranks 0-2 flushed their reports at step 22, rank 3
    (its 0.1 s flush timer out of phase) at step 16, 72 ms earlier. Read together, counts say 6 steps behind."""
    j = make()
    for r in range(3):
        report(j, r, 1, 10, 50.0, STEP, 0.5)
        report(j, r, 11, 22, 50.0, STEP, 0.75)
    report(j, 3, 1, 16, 50.0, STEP, 0.75)
    outs = check(j, 0.75)
    assert j.tracks[3].step == 16 and j.tracks[0].step == 22  # as read
    assert j.slow_info is None and slow_states(outs) == []  # at 50.192 (rank 3's last count) every rank was at 16


def test_a_straggler_is_named_with_its_step_and_the_leads_at_the_same_moment():
    j = make()
    for r in range(3):  # ranks 0-2: 12 ms a step; rank 3: 48 ms (a workload whose ranks do not wait for each other)
        flushes(j, r, 80, 50.0, STEP, 1.0)
    flushes(j, 3, 19, 50.0, 4 * STEP, 1.0, every=2)  # its step 19 at 50.912, when the others had counted 72
    outs = check(j, 1.0)
    assert j.slow_info["ranks"] == [3]
    assert j.slow_info["text"] == "rank 3 is far behind the other ranks (lead at step 72)"
    assert slow_states(outs) == [(3, "slow", "at step 19, 53 steps behind the lead (72)")]


def test_a_rank_whose_first_step_came_late_is_no_straggler_and_the_rank_falling_behind_is():
    """The CI case beside busy loops: rank 0's first step took 1.1 s (a core it waited for), so when it counted it,
    rank 1 (0.1 s a step) was at step 11: "10 steps behind the lead (11)" was named, and rank 1, the real straggler,
    never was (a run's straggler verdict is said once). A rank that starts behind and catches up is no straggler."""
    j = make(world=2)
    flushes(j, 1, 11, 50.0, 0.1, 1.2, every=1)  # step n at 50 + 0.1 n
    report(j, 0, 1, 1, 51.1, 0.005, 1.2)  # its first step counted at 51.105
    assert slow_states(check(j, 1.2)) == [] and j.slow_info is None
    flushes(j, 0, 60, 51.1, 0.005, 1.7, first=2)  # then 5 ms a step: step 60 at 51.4
    flushes(j, 1, 16, 50.0, 0.1, 1.7, every=1, first=12)
    outs = check(j, 1.7)
    assert j.slow_info["ranks"] == [1]
    assert slow_states(outs) == [(1, "slow", "at step 14, 46 steps behind the lead (60)")]


def test_a_straggler_that_began_after_the_lead_was_done_is_named_by_its_pace():
    """Beside busy loops rank 0 made all 60 steps (1.5 ms each) before rank 1 counted its first: their gap never
    grew while both were counting, but rank 1's steps take 0.1 s, 60 times the lead's."""
    j = make(world=2)
    flushes(j, 0, 60, 51.0, 0.0015, 1.1, every=30)
    flushes(j, 1, 5, 51.3, 0.1, 1.9, every=1)
    outs = check(j, 1.9)
    assert j.slow_info["ranks"] == [1]
    assert slow_states(outs) == [(1, "slow", "at step 1, 59 steps behind the lead (60)")]


def test_ranks_that_train_a_ddp_model_are_never_stragglers_by_their_counts():
    """A DDP model all-reduces in every step's backward: whatever the counts say, the ranks are in lock-step."""
    j = make()
    for r in range(4):
        j.lines(r, "out", ["@ddptui " + json.dumps({"k": "first_digest", "r": r, "source": "ddp", "params": []})],
                W0, T0)
    for r in range(3):
        flushes(j, r, 80, 50.0, STEP, 1.0)
    flushes(j, 3, 19, 50.0, 4 * STEP, 1.0, every=2)  # numbers that name rank 3 without DDP
    assert step_bound(j.tracks.values(), j.state.first_digests) == 2
    check(j, 1.0)
    assert j.slow_info is None


def track(rank: int, step: int, colls) -> RankTrack:
    t = RankTrack(rank, 0.0, step=step)
    for s, enq in colls:
        t.coll_marks.append((s, {"0": enq}))
    return t


def test_flight_recorder_numbers_bound_how_far_apart_the_ranks_can_be():
    every_step = [track(r, 40, [(10, 12), (40, 42)]) for r in range(2)]  # one all_reduce a step
    assert step_bound(every_step, {}) == 2
    every_tenth = [track(r, 100, [(10, 3), (100, 12)]) for r in range(2)]  # a barrier every 10 steps
    assert step_bound(every_tenth, {}) == 11
    once = [track(r, 100, [(10, 3), (100, 3)]) for r in range(2)]  # nothing since: nothing ties them
    assert step_bound(once, {}) is None
    mixed = [track(0, 40, [(10, 12), (40, 42)]), track(1, 40, [])]  # a rank that told nothing yet
    assert step_bound(mixed, {}) is None


def test_a_rank_on_another_node_is_compared_by_its_wall_clock():
    """Its monotonic clock is another machine's: its report's wall time is moved onto the engine's clock."""
    j = make(world=2)
    flushes(j, 0, 80, 50.0, STEP, 1.0)
    flushes(j, 1, 19, 10.0, 4 * STEP, 1.0, every=2, wall=lambda n: W0 - T0 + 50.0 + n * 4 * STEP)
    tracks = j.tracks.values()
    # read as this host's clock, its counts (at 10.x s, a machine booted later) come before all of rank 0's, and
    # rank 0 looks 11 steps behind rank 1: what comparing two machines' monotonic clocks says
    assert aligned_steps(tracks) == (19, {0: 8, 1: 19})
    (b,) = find_slow(tracks, remote={1}, wall_offset=W0 - T0)
    assert (b.rank, b.step, b.lead) == (1, 19, 72)
    j2 = make(world=2)  # an older inject: no wall time in its stamp, nothing to compare it by
    flushes(j2, 0, 80, 50.0, STEP, 1.0)
    flushes(j2, 1, 19, 10.0, 4 * STEP, 1.0, every=2)
    assert find_slow(j2.tracks.values(), remote={1}, wall_offset=W0 - T0) == []


def test_a_straggler_that_caught_up_is_no_longer_shown_slow_but_the_verdict_stays():
    j = make(world=2)
    flushes(j, 0, 80, 50.0, STEP, 1.0)
    flushes(j, 1, 19, 50.0, 4 * STEP, 1.0, every=2)
    check(j, 1.0)
    assert j.tracks[1].status == "slow"
    flushes(j, 0, 400, 50.0, STEP, 5.0, first=81)  # rank 1 caught up (say, the others waited at a barrier)
    fast = (50.0 + 400 * STEP - (50.0 + 19 * 4 * STEP)) / (400 - 19)  # from its step 19 to 400 with rank 0
    flushes(j, 1, 400, 50.0 + 19 * 4 * STEP - 19 * fast, fast, 5.0, first=20)
    outs = check(j, 5.0)
    assert slow_states(outs) == [(1, "running", "caught up: at step 400, the lead at 400")]
    assert j.slow_info["ranks"] == [1]  # the run had it: summary.json keeps it
    assert any("rank 1 caught up" in ln for o in outs if isinstance(o, ev.LogLines) for ln in o.lines)
    assert slow_states(check(j, 5.5)) == []  # said once


def test_a_rank_whose_steps_are_fast_again_is_back_at_pace():
    j = make(world=2)
    t = {0: 50.0, 1: 50.0}
    lines = {0: [], 1: []}
    for s in range(1, 61):
        for r in (0, 1):
            dt = 1.0 if (r == 1 and 25 <= s <= 30) else 0.01
            t[r] += dt
            lines[r].append((s, t[r], dt))

    def send(upto: int, read: float) -> None:  # every step the rank has not reported yet, one line each
        j.tick(T0 + read, W0 + read)
        for r in (0, 1):
            for s, at, dt in [x for x in lines[r] if (j.tracks[r].step or 0) < x[0] <= upto]:
                body = {"k": "loss", "r": r, "steps": [[s, 1.0]], "at": [s, at], "dt": [dt]}
                j.lines(r, "out", ["@ddptui " + json.dumps(body)], W0 + read, T0 + read)
    send(30, 8.0)
    check(j, 8.0)
    assert j.tracks[1].status == "slow" and j.slow_info["ranks"] == [1]
    send(60, 9.0)
    outs = check(j, 9.0)
    assert slow_states(outs) == [(1, "running", "back at pace: steps take 10 ms, its first 20 steps' 10 ms")]
    assert j.slow_info["ranks"] == [1]


def lockstep_slowed(load: float) -> Judge:
    """2 ranks whose steps all got 10x slower together (lock-step), the host at `load` on 2 cpus."""
    j = make(world=2)
    j.resources({}, host_load=(load, 2))
    for r in (0, 1):
        t = 50.0
        lines = []
        for s in range(1, 28):
            dt = 1.0 if s > 22 else 0.1
            t += dt
            lines.append("@ddptui " + json.dumps({"k": "loss", "r": r, "steps": [[s, 1.0]], "at": [s, t], "dt": [dt]}))
        j.tick(T0 + 2.0, W0 + 2.0)
        j.lines(r, "out", lines, W0 + 2.0, T0 + 2.0)
    return j


def sample(outside: int):
    """Stacks of both ranks: `outside` computing in its own code, the other waiting in the all-reduce."""
    from ddptui.runners.evidence.stack_types import Frame, StackResult, ThreadStack
    sp, user = "/venv/lib/python3.11/site-packages", "/work/train.py"
    wait = [Frame("all_reduce", f"{sp}/torch/distributed/distributed_c10d.py", 3252, "work.wait()"),
            Frame("main", user, 30, "dist.all_reduce(t)")]
    work = [Frame("forward", user, 12, "x = layer(x)"), Frame("main", user, 28, "loss = model(x)")]
    return {r: StackResult(r, 100 + r, "py-spy", [ThreadStack("MainThread", 1, r != outside,
                                                              work if r == outside else wait)]) for r in (0, 1)}


def run_samples(j: Judge, outside: list[int]) -> list:
    outs = []
    for k, who in enumerate(outside):
        j.tick(T0 + 2.0 + 1.5 * k, W0 + 2.0 + 1.5 * k)
        checked = j.check()
        outs += checked
        for req in [o for o in checked if isinstance(o, CollectStacks)]:
            outs += j.stacks_collected(req, sample(who), f"runs/x/stacks/0{k + 1}-slow")
    return outs


def test_every_rank_slowed_on_an_overloaded_machine_is_the_machines_load_unless_one_rank_is_caught_twice():
    """Under load the rank caught outside its collective is the one waiting for a core at that moment, a different
    one each time: naming it blamed a healthy rank. Overloaded, a rank is named only when found there twice."""
    j = lockstep_slowed(load=18.5)
    outs = run_samples(j, [0, 1, 0])
    assert j.slow_info["ranks"] == [0] and "in two stack samples" in j.slow_info["text"]
    said = [ln for o in outs if isinstance(o, ev.LogLines) for ln in o.lines]
    j = lockstep_slowed(load=18.5)
    outs = run_samples(j, [0, 1, -1])  # the third sample catches both in the all-reduce
    assert j.slow_info["ranks"] == [] and slow_states(outs) == []
    assert j.slow_info["text"].startswith("every rank's steps got slower together (rank 0's steps take 1.00 s, 10x")
    assert j.slow_info["text"].endswith(" while the machine is overloaded (load 18.5 on 2 cpus): the machine's load, "
                                        "not one rank (3 stack samples found no rank twice outside a collective)")
    assert [ln for ln in said if ln.startswith("ddptui: every rank's steps got slower (")][0].endswith(
        " while the machine is overloaded (load 18.5 on 2 cpus); sampling stacks to find the rank whose own work grew")


def test_every_rank_slowed_on_a_machine_within_its_cores_names_the_first_rank_caught():
    j = lockstep_slowed(load=1.5)
    run_samples(j, [1])
    assert j.slow_info["ranks"] == [1] and "in two stack samples" not in j.slow_info["text"]


def test_a_busy_rank_keeps_its_cpu_evidence_when_its_own_pid_replaces_its_launchers():
    """Before its hello a rank's CPU is its launcher's tree (seconds of the whole tree); its own process counts from
    0. The switch must not leave a busy rank past its limit without evidence, to be called stalled in that gap: an
    XLA replica's hello comes on its launcher's output, its quiet time goes on (a healthy start held at load 20 was
    stopped so)."""
    j = Judge(load_profile(ROOT / "profiles" / "cpu-ddp.yaml", ["nproc=1", "startup_grace=5", "stall_after=3"]),
              T0, W0)
    j.begin(1, 1)
    for s in range(1, 7):  # the launcher's tree burns 0.9 of a core while the rank starts
        j.tick(T0 + s, W0 + s)
        j.resources({0: (500, T0 + s, 40.0 + 0.9 * s, 10)})
    j.tick(T0 + 6.2, W0 + 6.2)
    j.lines(None, "out", ["@ddptui " + json.dumps({"k": "hello", "r": 0, "pid": 501, "host": "h", "world": 1})],
            W0 + 6.2, T0 + 6.2)
    j.tick(T0 + 6.3, W0 + 6.3)
    j.resources({0: (501, T0 + 6.3, 2.0, 10)}, emit=False)  # its own process: 2 s of CPU so far
    j.tick(T0 + 6.5, W0 + 6.5)
    outs = j.check(cores=2, load=0.0)
    assert [o for o in outs if isinstance(o, ev.StallDetected)] == []
    assert any("busy, not stalled" in ln for o in outs if isinstance(o, ev.LogLines) for ln in o.lines)
