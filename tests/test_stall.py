"""The stall rule without processes: which limit applies and says so, and CPU evidence that holds a stall off."""
from __future__ import annotations

from collections import deque
from types import SimpleNamespace

import pytest

from ddptui.runners.judge.rank_track import RankTrack
from ddptui.runners.evidence.stall import (Held, Limit, Quiet, Stall, busy_floor, cpu_share, judge, limit_for, quiet_ranks,
                                  sharing_cores)

pytestmark = pytest.mark.any_python


def prof(stall_after="auto", startup_grace=60.0):
    return SimpleNamespace(stall_after=stall_after, startup_grace=startup_grace)


def test_startup_grace_applies_before_the_first_step_and_says_so():
    lim = limit_for(prof(), started=False, median=None)
    assert lim == Limit(60.0, "startup_grace 60 s applies before the first step")
    assert limit_for(prof(), started=True, median=None) == Limit(30.0, "stall_after auto: 30 s until step times are known")


def test_auto_limit_from_the_median_step():
    assert limit_for(prof(), True, 0.05) == Limit(10.0, "stall_after auto = 20 x median step 50 ms, min 10 s")
    assert limit_for(prof(), True, 2.0).seconds == 40.0
    assert limit_for(prof(stall_after=4.0), True, 2.0) == Limit(4.0, "stall_after 4 s")
    # a fixed stall_after above the grace applies before the first step too
    assert limit_for(prof(stall_after=100.0, startup_grace=60.0), False, None).seconds == 100.0


def q(rank, quiet, limit=Limit(60.0, "startup_grace 60 s applies before the first step"), cpu=None):
    return Quiet(rank, quiet, limit, cpu)


def test_idle_ranks_past_the_limit_are_a_stall_naming_the_rule_and_its_numbers():
    found = judge([q(0, 61.2, cpu=0.005), q(1, 61.4, cpu=0.0)], floor=0.25)
    assert isinstance(found, Stall) and found.stalled == [0, 1] and found.trigger.rank == 1
    assert found.reason == "no step or output for 61 s (startup_grace 60 s applies before the first step)"
    assert found.trigger.limit.seconds == 60.0  # what StallDetected.threshold carries: the limit that applied


def test_a_busy_quiet_rank_holds_the_stall_off():
    found = judge([q(0, 61.0, cpu=0.004), q(1, 50.0, cpu=0.9)], floor=0.25)
    assert isinstance(found, Held) and found.busy == {1: 0.9} and found.until == 180.0
    assert "rank 1 still uses 90 % of a core: busy, not stalled" in found.reason


def test_a_busy_rank_is_a_stall_after_three_times_the_limit():
    lim = Limit(2.0, "stall_after 2 s")
    found = judge([q(0, 6.5, lim, cpu=0.005), q(1, 6.4, lim, cpu=1.0)], floor=0.25)
    assert isinstance(found, Stall) and found.stalled == [0, 1]
    assert found.reason == ("no step or output for 6 s (stall_after 2 s); rank 1 still uses 100 % of a core, "
                            "held 3 x the limit (6 s) without a step: busy but not progressing")


def test_progressing_ranks_are_not_stalled_and_unmeasured_cpu_does_not_hold():
    lim = Limit(10.0, "stall_after 10 s")
    found = judge([q(0, 0.2, lim, cpu=0.9), q(1, 11.0, lim, cpu=None)], floor=0.25)
    assert isinstance(found, Stall) and found.stalled == [1] and found.progressing == [0]
    assert judge([q(0, 9.0, lim), q(1, 9.9, lim)], floor=0.25) is None


def test_many_ranks_sharing_two_cores_still_count_as_busy():
    floor = busy_floor(ncpu=2, ranks=32, load=30.0)
    assert floor == pytest.approx(0.03)  # a rank blocked in gloo uses ~0.5 %, a computing one 2/32 = 6 %
    found = judge([q(r, 61.0, cpu=0.06) for r in range(32)], floor)
    assert isinstance(found, Held) and len(found.busy) == 32
    assert "ranks 0-31 still use 6 % of a core each" in found.reason
    assert busy_floor(ncpu=2, ranks=2, load=0.5) == 0.25
    assert busy_floor(ncpu=2, ranks=2, load=8.0) == pytest.approx(0.0625)


def test_cpu_share_over_the_window():
    hist = deque([(10.0, 1.0), (11.0, 2.0), (12.0, 2.0), (13.0, 2.01)])
    assert cpu_share(hist, 13.1, 2.0) == pytest.approx(0.005)  # idle for the last 2 s
    assert cpu_share(hist, 13.1, 3.0) == pytest.approx(1.01 / 3)
    assert cpu_share(hist, 20.0, 2.0) is None  # stale: no recent sample
    assert cpu_share(deque([(13.0, 2.0)]), 13.0, 2.0) is None  # one sample measures nothing
    assert cpu_share(hist, 13.1, 0.2) is None


def test_quiet_ranks_from_tracks():
    tracks = [RankTrack(0, 0.0, last_progress=0.0), RankTrack(1, 0.0, last_progress=0.0)]
    tracks[1].saw_step(5, None, 0.0, 0.0, reported=True)
    for r, t in enumerate(tracks):
        t.cpu_hist.extend([(97.0, 1.0 + r), (100.0, 1.0 + 4 * r)])
    got = {x.rank: x for x in quiet_ranks(prof(stall_after=30.0), tracks, 100.0)}
    assert got[0].limit.seconds == 60.0 and got[1].limit.seconds == 30.0
    assert got[0].cpu == pytest.approx(0.0) and got[1].cpu == pytest.approx(1.0)
    tracks[0].verdict = {"ok": True, "text": ""}  # completed: waiting to exit is not a stall
    assert [x.rank for x in quiet_ranks(prof(), tracks, 100.0)] == [1]


def test_the_startup_grace_holds_until_a_rank_is_past_its_first_step():
    # a step the rank reports itself (the optimizer hook counts finished steps) or a line with a step and its loss
    # ends its start-up at once; a bare step number read from its lines only from the second one on: "hanging at
    # step 0" comes before that step's work
    profile = prof(stall_after=3.0, startup_grace=5.0)
    parsed, reported = RankTrack(0, 0.0), RankTrack(1, 0.0)
    limits = lambda: {q.rank: q.limit.seconds for q in quiet_ranks(profile, [parsed, reported], 10.0, with_cpu=False)}
    assert limits() == {0: 5.0, 1: 5.0}
    parsed.saw_step(0, None, 1.0, 1.0)
    reported.saw_step(0, 0.5, 1.0, 1.0, reported=True)
    assert limits() == {0: 5.0, 1: 3.0}
    parsed.saw_step(0, 0.7, 2.0, 2.0)  # the same step again, now with its loss: done
    assert limits() == {0: 3.0, 1: 3.0}
    bare = RankTrack(2, 0.0)
    for step in (0, 1):
        assert quiet_ranks(profile, [bare], 10.0, with_cpu=False)[0].limit.seconds == 5.0
        bare.saw_step(step, None, 1.0, 1.0)  # "epoch 0 step 0/100", no loss: the second such line ends it
    assert quiet_ranks(profile, [bare], 10.0, with_cpu=False)[0].limit.seconds == 3.0


def test_a_rank_on_another_node_has_no_cpu_evidence_whatever_its_history():
    tracks = [RankTrack(r, 0.0, last_progress=0.0) for r in range(2)]
    for t in tracks:
        t.cpu_hist.extend([(97.0, 1.0), (100.0, 4.0)])  # e.g. sampled before its hello named another host
    got = {x.rank: x for x in quiet_ranks(prof(stall_after=30.0), tracks, 100.0, no_cpu={1: "runs on node1"})}
    assert got[0].cpu == pytest.approx(1.0) and got[0].no_cpu == ""
    assert got[1].cpu is None and got[1].no_cpu == "runs on node1"
    assert sharing_cores(list(got.values())) == 1  # the busy floor counts the ranks on this machine's cores only


def test_a_remote_rank_is_neither_busy_nor_idle_to_the_busy_test():
    lim = Limit(10.0, "stall_after 10 s")
    remote = Quiet(1, 11.0, lim, None, "runs on node1")
    # no local rank busy: the stall stands on quiet time alone, and says the remote rank's CPU is unknown
    found = judge([q(0, 11.0, lim, cpu=0.004), remote], floor=0.25)
    assert isinstance(found, Stall) and found.stalled == [0, 1]
    assert found.reason == ("no step or output for 11 s (stall_after 10 s); no CPU evidence for rank 1 "
                            "(runs on node1): judged by quiet time alone")
    # a busy local rank still holds it off, the remote one is among the stalled ranks the hold is about
    held = judge([q(0, 11.0, lim, cpu=0.9), remote], floor=0.25)
    assert isinstance(held, Held) and held.busy == {0: 0.9}


def test_ranks_on_other_nodes_do_not_lower_the_busy_floor():
    # 2 ranks here on 2 cores, 2 more on node1: each local rank's fair share is a whole core, not half
    lim = Limit(10.0, "stall_after 10 s")
    quiet = [q(0, 11.0, lim, cpu=0.2), q(1, 11.0, lim, cpu=0.004),
             Quiet(2, 11.0, lim, None, "runs on node1"), Quiet(3, 11.0, lim, None, "runs on node1")]
    assert busy_floor(2, sharing_cores(quiet), 0.0) == 0.25
    assert isinstance(judge(quiet, busy_floor(2, sharing_cores(quiet), 0.0)), Stall)  # 20 % of a core: not busy
    assert isinstance(judge(quiet, busy_floor(2, len(quiet), 0.0)), Held)  # what counting all 4 would have said


def test_a_verdict_names_the_step_the_rank_printed_when_it_tells_the_hooks_moment():
    """A loop from 0 prints "step 5" after 6 optimizer steps; a sudden death may lose the hook's last batched report:
    the step named is the printed one either way, never 5 or 6 by chance."""
    flushed, lost = RankTrack(0, 0.0), RankTrack(1, 0.0)
    for t in (flushed, lost):
        t.saw_step(5, None, 1.0, 1.0, reported=True)  # the hook: 5 steps done
        t.saw_step(4, 0.3, 1.0, 1.0)  # printed "step 4 loss 0.3"
        t.saw_step(5, 0.3, 1.1, 1.1)  # printed "step 5 loss 0.3", then it died
    flushed.saw_step(6, None, 1.1, 1.1, reported=True)  # the hook's report of step 6 made it out before the death
    assert (flushed.step, lost.step) == (6, 5)
    assert flushed.step_named == lost.step_named == 5
    sparse = RankTrack(2, 0.0)  # prints every 100 steps: its count is newer than its line
    sparse.saw_step(100, 0.2, 1.0, 1.0)
    sparse.saw_step(180, None, 2.0, 2.0, reported=True)
    assert sparse.step_named == 180
    assert RankTrack(3, 0.0).step_named is None


def test_a_machine_far_over_its_cores_holds_busy_ranks_longer_and_says_so_with_its_bound():
    """The issue's XLA run at load 38 on 2 cores: both replicas at 6 % of a core, quiet 25 s past stall_after 8:
    torn down at 3 x the limit (24 s). Each rank gets 19x less of a core than alone: the hold grows with the load
    over the cores, at most 10 x (240 s here), and the words say why and how long."""
    lim = Limit(8.0, "stall_after 8 s")
    quiet = [q(0, 25.0, lim, cpu=0.06), q(1, 25.0, lim, cpu=0.06)]
    floor = busy_floor(2, 2, 38.0)
    assert isinstance(judge(quiet, floor), Stall)  # without the machine's load: the old 24 s
    held = judge(quiet, floor, cores=2, load=38.0)
    assert isinstance(held, Held) and held.until == 240.0
    assert held.reason == ("no step or output for 25 s (stall_after 8 s), but ranks 0, 1 still use 6 % of a core each: "
                           "busy, not stalled; held until 240 s (3 x the limit x 10.0; the machine is overloaded "
                           "(load 38.0 on 2 cpus): the hold grows with its load over its cores, up to 10 x)")
    gone = judge([q(0, 241.0, lim, cpu=0.06), q(1, 241.0, lim, cpu=0.06)], floor, cores=2, load=38.0)
    assert isinstance(gone, Stall) and "held 3 x the limit x 10.0 (240 s; the machine is overloaded" in gone.reason
    assert judge(quiet, floor, cores=2, load=5.0).until == pytest.approx(60.0)  # 2.5 x its cores: 3 x 8 x 2.5
    assert isinstance(judge(quiet, floor, cores=2, load=1.5), Stall)  # not over its cores: 3 x the limit, 24 s
    idle = [q(0, 25.0, lim, cpu=0.004), q(1, 25.0, lim, cpu=0.005)]  # blocked ranks are a stall whatever the load
    assert isinstance(judge(idle, floor, cores=2, load=38.0), Stall)


def test_a_rank_whose_process_died_is_no_stall_while_its_exit_code_is_pending():
    """On a loaded machine the launcher reaped the exited rank before the death watch read its code (returncode
    None until torchrun's table): 7 s of quiet after its last step was called a stall and the run stopped, exit 3."""
    tracks = [RankTrack(0, 0.0, last_progress=0.0)]
    assert [x.rank for x in quiet_ranks(prof(stall_after=3.0), tracks, 10.0)] == [0]
    tracks[0].exit_wall = 9.0  # the death watch saw it go
    assert quiet_ranks(prof(stall_after=3.0), tracks, 10.0) == [] and tracks[0].alive
