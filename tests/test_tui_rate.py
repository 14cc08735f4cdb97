"""Step time, the run's pace and ETA, the machine's load and the ranks' start-up phases, from hand-built events."""
from __future__ import annotations

import json

import pytest

from ddptui.runners import events as ev
from ddptui.runners.evidence.words import clock_words
from ddptui.tui import rate
from ddptui.tui.model import RunModel
from tests.support.scenes import batched, told

pytestmark = pytest.mark.any_python

T = 1_764_000_000.0


def started(world: int = 2, steps: int | None = 100) -> RunModel:
    m = RunModel()
    m.apply([ev.RunStarted("runs/x", "p", "torchrun", world, steps, T)])
    return m


# ---- a rank's step time from its Progress read times (a record from before Progress carried the engine's) -------
class ReadTimesOfOne:
    """One rank's Progress events folded by rate.ReadTimes: the engine's rule over their read times."""

    def __init__(self) -> None:
        self.times = rate.ReadTimes()

    def add(self, wall: float, step: int | None) -> None:
        self.times.add(0, wall, step)

    def step_time(self) -> float | None:
        clock = self.times.clocks.get(0)
        return clock.step_time() if clock is not None else None


def test_batched_reports_are_timed_between_reads_not_within_one():
    """10 steps per read, a read every second: 0.1 s a step, not 0 (the 10 steps of one read share its time)."""
    r = ReadTimesOfOne()
    for i in range(1, 6):
        r.add(T + i, 10 * i)
    assert r.step_time() == pytest.approx(0.1)


def test_one_point_or_one_read_has_no_step_time():
    r = ReadTimesOfOne()
    assert r.step_time() is None
    r.add(T, 10)
    assert r.step_time() is None
    r.add(T, 20)  # read together with the previous point: still one read
    assert r.step_time() is None
    r.add(T + 2, 30)
    assert r.step_time() == pytest.approx(2 / 10)  # from that read's newest step, 20


def test_step_time_follows_the_recent_window():
    """Fast for a minute, then 1 s a step: within WINDOW of the newest point the step time is the new pace."""
    r = ReadTimesOfOne()
    for i in range(60):
        r.add(T + i, 100 * i)  # 0.01 s a step
    base = 100 * 59
    for i in range(1, 16):
        r.add(T + 59 + i, base + i)  # 1 s a step
    assert r.step_time() == pytest.approx(1.0)


def test_a_step_slower_than_the_window_uses_the_point_before():
    r = ReadTimesOfOne()
    r.add(T, 1)
    r.add(T + 60, 2)
    r.add(T + 120, 3)
    assert r.step_time() == pytest.approx(60.0)


def test_a_restarted_count_starts_over():
    r = ReadTimesOfOne()
    r.add(T, 50)
    r.add(T + 1, 60)
    r.add(T + 2, 1)  # a restart: step 1 again
    assert r.step_time() is None
    r.add(T + 4, 5)
    assert r.step_time() == pytest.approx(0.5)


# ---- the run's pace ---------------------------------------------------------------------------------------
def test_pace_is_the_rank_that_finishes_last_and_eta_is_its_steps_left_times_its_step_time():
    m = started(world=3, steps=500)
    for i in range(1, 6):  # rank 0: 10 steps a second; rank 1: 5; rank 2: 10 but far behind
        m.apply([batched(0, 100 + 10 * i, T + i), batched(1, 100 + 5 * i, T + i, 5), batched(2, 10 * i, T + i)])
    assert m.rank(0).step_time == pytest.approx(0.1)
    assert m.rank(1).step_time == pytest.approx(0.2)
    p = m.pace()
    assert p.rank == 1 and p.steps_per_s == pytest.approx(5.0)
    assert p.eta == pytest.approx((500 - 125) * 0.2)  # 75 s: rank 2 has 450 left at 0.1 s = 45 s
    m.apply([ev.RankState(1, "exited", "", T + 6)])
    p = m.pace()
    assert p.rank == 2 and p.eta == pytest.approx(450 * 0.1)


def test_pace_without_a_step_count_is_the_slowest_rank_and_no_eta():
    m = started(steps=None)
    for i in range(1, 4):
        m.apply([batched(0, 10 * i, T + i), batched(1, 4 * i, T + i, 4)])
    p = m.pace()
    assert (p.rank, p.eta) == (1, None) and p.step_time == pytest.approx(0.25)


def test_no_pace_before_two_reads_or_once_every_rank_is_done():
    m = started(steps=20)
    m.apply([batched(0, 10, T + 1), batched(1, 10, T + 1)])
    assert m.pace() is None
    m.apply([batched(0, 20, T + 2), batched(1, 20, T + 2)])
    assert m.rank(0).step_time == pytest.approx(0.1)
    assert m.pace() is None  # both reached the last step: nothing left to time


def test_formats():
    assert rate.fmt_rate(3.14) == "3.1 steps/s"
    assert rate.fmt_rate(0.25) == "0.25 steps/s"
    assert rate.fmt_rate(250.0) == "250 steps/s"
    assert rate.fmt_step_time(0.31) == "0.31 s/step"
    assert rate.fmt_step_time(12.4) == "12 s/step"
    assert rate.fmt_step_time(0.0042) == "4.2 ms/step"
    assert clock_words(45) == "45s"
    assert clock_words(130) == "2m10s"
    assert clock_words(3725) == "1h02m"


def test_load_in_words():
    assert rate.load_text(1.2, 2) == "load 1.2/2 cpus"
    assert rate.load_text(29.7, 2) == "load 29.7 on 2 cpus (overloaded)"
    assert rate.load_text(2.0, 2) == "load 2.0/2 cpus"  # every cpu busy is not yet overloaded
    assert rate.load_text(0.5, None) == "load 0.5"


# ---- the machine's load through the model and the header --------------------------------------------------
def test_resources_carry_the_hosts_load_and_older_records_have_none():
    m = started()
    m.apply([ev.Resources({0: 50.0}, {0: 1 << 20}, T + 1)])  # an older record: no load
    assert m.load is None
    m.take_changes()
    m.apply([ev.Resources({}, {}, T + 2, 29.7, 2)])
    assert (m.load, m.cpus) == (29.7, 2) and m.take_changes().run
    back = ev.from_json(json.loads(json.dumps(ev.Resources({0: 1.0}, {0: 2}, T, 3.5, 16).to_json())))
    assert (back.load, back.cpus, back.cpu) == (3.5, 16, {0: 1.0})
    old = {"kind": "resources", "cpu": {"0": 1.0}, "rss": {"0": 2}, "wall": T}
    assert ev.from_json(old).load is None


def test_header_says_pace_eta_and_load():
    from ddptui.tui.screens.run import head_text
    m = started(steps=500)
    for i in range(1, 4):
        m.apply([batched(0, 10 * i, T + i), batched(1, 10 * i, T + i)])
    m.apply([ev.Resources({}, {}, T + 4, 29.7, 2)])
    head = head_text(m, "live").plain
    assert " · 10.0 steps/s · ETA 47s · load 29.7 on 2 cpus (overloaded)" in head  # 470 steps at 0.1 s
    m.apply([ev.Resources({}, {}, T + 5, 1.5, 2)])
    assert " · load 1.5/2 cpus" in head_text(m, "live").plain  # (the status is right after the profile: C)


def test_rank_status_line_says_step_time():
    from ddptui.tui.widgets.rank_pane import status_line
    m = started(steps=500)
    m.apply([batched(0, 100, T + 1), batched(0, 120, T + 7.2, 20)])
    assert status_line(m.rank(0), m.steps).startswith("step 120/500 0.31 s/step")


# ---- start-up phases --------------------------------------------------------------------------------------
def phases_of(events) -> list[str]:
    """The phases rank 0 goes through as the model folds the events one by one."""
    m = started()
    seen = [m.rank(0).phase]
    for e in events:
        m.apply([e])
        if seen[-1] != m.rank(0).phase:
            seen.append(m.rank(0).phase)
    return seen


def test_phases_from_spawn_to_first_step():
    evs = [ev.ProcessStarted("torchrun", 100, (0, 1), T + 0.1),
           ev.RankHello(0, 101, "h", 2, T + 3),
           ev.RankPhase(0, "importing torch", T + 3.1),
           ev.RankPhase(0, "setting up", T + 9),
           ev.RankPhase(0, "rendezvous", T + 9.5),
           ev.LogLines(0, "out", T + 10, 0.0, ("rank 0 joined",)),
           ev.RankPhase(0, "waiting for first step", T + 20),
           batched(0, 10, T + 21)]
    assert phases_of(evs) == ["", "spawning", "starting python", "importing torch", "setting up", "rendezvous",
                              "waiting for first step", ""]


def test_phase_seconds_and_pane_text():
    from ddptui.tui.widgets.rank_pane import status_line
    m = started()
    m.apply([ev.RankPhase(0, "rendezvous", T + 2), ev.Resources({}, {}, T + 14, 0.5, 2)])
    rv = m.rank(0)
    assert m.phase_text(rv) == "rendezvous 12s"
    assert status_line(rv, m.steps, m.last_wall).startswith("rendezvous 12s  cpu -")
    m.take_changes()
    m.apply([ev.Resources({}, {}, T + 15, 0.5, 2)])  # no news of the rank, yet its seconds moved: redrawn
    assert 0 in m.take_changes().ranks


def test_no_phase_after_the_first_step_or_the_end():
    m = started()
    m.apply([batched(0, 10, T + 1), ev.RankPhase(0, "rendezvous", T + 2)])  # a program that initialises again
    assert m.rank(0).phase == ""
    m.apply([ev.RankPhase(1, "rendezvous", T + 2), ev.RankState(1, "failed", "exit 1", T + 3)])
    assert m.rank(1).phase == ""
    m.apply([ev.RankPhase(1, "setting up", T + 4)])  # a late report of a rank that ended
    assert m.rank(1).phase == ""


# ---- the engine's side: the phase report ------------------------------------------------------------------
def test_phase_reports_become_events_and_are_no_sign_of_life():
    """A `phase` report is a RankPhase event; it neither starts the rank's clock as output nor counts as progress
    (a rank stuck in its rendezvous must still stall), and a word the engine does not know is dropped."""
    from tests.support.judge import W0, hello, make, of, say
    j = make()
    hello(j, 0)
    quiet_since = j.state.tracks[0].last_progress
    outs = []
    for dt, phase in ((1.0, "importing torch"), (2.0, "setting up"), (3.0, "rendezvous"), (3.5, "rendezvous"),
                      (4.0, "eating lunch"), (5.0, "waiting for first step")):
        outs += say(j, 0, dt, "@ddptui " + json.dumps({"k": "phase", "r": 0, "phase": phase}))
    got = of(outs, ev.RankPhase)
    assert [(e.rank, e.phase) for e in got] == [(0, "importing torch"), (0, "setting up"), (0, "rendezvous"),
                                                (0, "waiting for first step")]
    assert got[0].wall == W0 + 1.0
    t = j.state.tracks[0]
    assert t.last_progress == quiet_since and t.step is None and not of(outs, ev.LogLines)
    outs = say(j, 0, 6.0, "@ddptui " + json.dumps({"k": "step", "r": 0, "step": 1}),
               "@ddptui " + json.dumps({"k": "phase", "r": 0, "phase": "rendezvous"}))
    assert not of(outs, ev.RankPhase)  # after its first step a rank is training, whatever it calls


def test_an_xla_workers_own_start_up_is_every_replicas_phase_until_its_thread_begins(tmp_path):
    """PJRT CPU runs the replicas as threads of one worker: before they exist the process says its import of torch
    without a rank (its main thread has no ordinal), which is the phase of each replica that has not begun."""
    import sys

    from ddptui.runners.judge.judge import Judge
    from ddptui.runners.launch.profile.load import load_profile
    from ddptui.runners.launch.registry import traits_of
    from tests.support.judge import T0, W0, of, say
    path = tmp_path / "xla.yaml"
    path.write_text(f"name: x\nrunner: xla\nnproc: 2\nworkload:\n  script: train.py\n  python: {sys.executable}\n"
                    "backend: xla\ndevice: xla\nxla:\n  pjrt_device: CPU\n  num_devices: 2\n")
    (tmp_path / "train.py").write_text("")
    p = load_profile(path, [])
    j = Judge(p, T0, W0, runner=traits_of(p))
    j.begin(2, 1)
    phase = lambda r, p: "@ddptui " + json.dumps({"k": "phase", "r": r, "phase": p})
    outs = say(j, None, 1.0, phase(None, "importing torch"), phase(None, "setting up"))
    assert [(e.rank, e.phase) for e in of(outs, ev.RankPhase)] == [(0, "importing torch"), (1, "importing torch"),
                                                                  (0, "setting up"), (1, "setting up")]
    # replica 0's thread began (its reports name it); a later report of the process is no longer its phase
    outs = say(j, None, 2.0, phase(0, "waiting for first step"), phase(None, "importing torch"))
    assert [(e.rank, e.phase) for e in of(outs, ev.RankPhase)] == [(0, "waiting for first step"),
                                                                  (1, "importing torch")]
    # under torchrun a report without a rank is nobody's (only XLA's worker hosts ranks it cannot name)
    from tests.support.judge import make
    j = make()
    assert not of(say(j, None, 1.0, phase(None, "importing torch")), ev.RankPhase)


# ---- the headless console's summary -----------------------------------------------------------------------
def test_console_summary_says_the_slowest_ranks_pace_and_the_highest_load():
    import io

    from ddptui.tui.console import Console
    out = io.StringIO()
    c = Console(out=out, color=False)
    batch = [ev.RunStarted("runs/x", "p", "torchrun", 2, 100, T)]
    for i in range(1, 11):
        batch += [batched(0, 10 * i, T + 5 + i), batched(1, 5 * i, T + 5 + i, 5)]
    batch += [ev.Resources({}, {}, T + 8, 29.7, 2), ev.Resources({}, {}, T + 12, 3.0, 2)]
    c.handle(batch)
    c.handle([ev.RunFinished("ok", 0, "runs/x/summary.json", T + 20,
                             {"profile": "p", "runner": "torchrun", "world_size": 2, "duration_s": 20.0, "ranks": {},
                              "status": "ok", "run_dir": "runs/x"})])
    assert ("pace: 5.0 steps/s, 0.20 s/step (rank 1, the slowest, first step to last); "
            "machine load up to 29.7 on 2 cpus (overloaded)\n") in out.getvalue()


def test_console_summary_without_progress_or_load_says_nothing_of_them():
    t = rate.RunTally()
    assert t.line() is None
    t.progress(0, T, 5)  # one point: no pace
    t.resources(None, None)  # an older record's sample
    assert t.line() is None
    t.resources(0.4, 16)
    assert t.line() == "machine load up to 0.4/16 cpus"


def test_the_hosts_load_is_sent_each_sample_unless_every_rank_runs_on_another_node():
    from tests.support.judge import PIDS, T0, make, of
    j = make()
    got = of(j.resources({}, host_load=(29.7, 2)), ev.Resources)  # no rank's pid known yet: the load still goes
    assert [(e.cpu, e.load, e.cpus) for e in got] == [({}, 29.7, 2)]
    assert not of(j.resources({}, host_load=None), ev.Resources)  # no load average on this system, no CPU sample
    got = of(j.resources({0: (PIDS[0], T0 + 1, 1.0, 10)}, no_cpu={1: "runs on node1"}, host_load=(1.0, 2)),
             ev.Resources)
    assert [(e.load, e.cpus) for e in got] == [(1.0, 2)]  # rank 0 runs here
    assert not of(j.resources({}, no_cpu={0: "runs on node1", 1: "runs on node1"}, host_load=(1.0, 2)), ev.Resources)


# ---- samples a second, where the ranks' model inputs told their batch ---------------------------------------
def test_header_says_no_step_for_once_the_newest_step_is_late_and_the_pace_decays():
    """A hung run's header said '10.0 steps/s · ETA 47s' until its stall was declared; by its own pace (0.1 s a step,
    late after 3 of them, never before 2 s) the newest step is late: say for how long, and let the pace fall."""
    from ddptui.tui.screens.run import head_text
    m = started(steps=500)
    for i in range(1, 4):
        m.apply([told(0, 10 * i, T + i, 32), told(1, 10 * i, T + i, 32)])
    m.apply([ev.Resources({}, {}, T + 4.9)])  # 1.9 s after the last step: batched reads, not late yet
    head = head_text(m, "live").plain
    assert " · 10.0 steps/s · ETA 47s · " in head and " · 640 samples/s" in head
    m.apply([ev.Resources({}, {}, T + 15)])  # the engine's samples come every second while nothing else does
    head = head_text(m, "live").plain
    assert " · 0.083 steps/s · no step for 12s · " in head and " · 5.3 samples/s" in head and "ETA" not in head
    assert m.no_step_for() == pytest.approx(12.0)
    m.apply([ev.Resources({}, {}, T + 63)])
    head = head_text(m, "live").plain
    assert " · 0.017 steps/s · no step for 1m00s · " in head and " · 1.1 samples/s" in head
    m.apply([told(0, 40, T + 64, 32), told(1, 40, T + 64, 32)])  # steps again: the measured pace, the time left
    head = head_text(m, "live").plain
    assert "no step for" not in head and " · ETA " in head
    m.apply([ev.RunFinished("stalled", 3, "runs/x/summary.json", T + 200, {})])
    assert m.no_step_for() is None and "no step for" not in head_text(m, "live").plain  # the end says how it ended


def test_a_late_rank_sets_the_pace_and_the_run_is_late_only_when_no_rank_steps():
    ranks = [rate_view(0, 30, 0.1, T + 3), rate_view(1, 30, 0.1, T + 3)]
    assert rate.no_step_for(ranks, 500, T + 4) is None and rate.run_pace(ranks, 500, T + 4).step_time == 0.1
    ranks[0] = rate_view(0, 130, 0.1, T + 13)  # rank 1 is silent 10 s while rank 0 steps on: it finishes last
    p = rate.run_pace(ranks, 500, T + 13)
    assert (p.rank, p.step_time) == (1, pytest.approx(10.0)) and rate.no_step_for(ranks, 500, T + 13) is None
    assert rate.no_step_for(ranks, 500, T + 16) == pytest.approx(3.0)  # 3 step times and 2 s after the newest
    assert rate.run_pace(ranks, 500).step_time == 0.1  # without a clock: the pace as measured
    done = [rate_view(0, 500, 0.1, T + 3), rate_view(1, 500, 0.1, T + 3)]
    assert rate.no_step_for(done, 500, T + 60) is None  # at the last step: finishing, not late


def rate_view(rank: int, step: int, step_time: float, step_wall: float):
    from ddptui.tui.model import RankView
    return RankView(rank, status="running", step=step, step_time=step_time, step_wall=step_wall)


def test_samples_a_second_are_each_ranks_samples_per_step_over_its_step_time_summed_over_live_ranks():
    from ddptui.tui.screens.run import head_text
    from ddptui.tui.widgets.rank_pane import status_line
    m = started(steps=500)
    for i in range(1, 4):  # rank 0: 10 steps/s x 32; rank 1: 5 steps/s x 64 (another batch: it says its own)
        m.apply([told(0, 10 * i, T + i, 32), told(1, 5 * i, T + i, 64, 5)])
    assert m.samples_rate() == pytest.approx(10 * 32 + 5 * 64)
    head = head_text(m, "live").plain
    assert " · 5.0 steps/s · ETA 1m37s · " in head and " · 640 samples/s" in head  # ETA before the nice-to-haves
    assert status_line(m.rank(0), m.steps).startswith("step 30/500 0.10 s/step  320 samples/s  loss")
    m.apply([ev.RankState(1, "exited", "", T + 4)])
    assert m.samples_rate() == pytest.approx(320)  # an ended rank trains nothing


def test_no_samples_a_second_without_a_batch_or_a_step_time():
    from ddptui.tui.screens.run import head_text
    m = started(steps=500)
    m.apply([told(0, 10, T + 1, 32)])
    assert m.samples_rate() is None  # one read: no step time yet
    m2 = started(steps=500)
    for i in range(1, 4):
        m2.apply([batched(0, 10 * i, T + i)])  # a rank whose model took no hook (an older record, no DDP model)
    assert m2.samples_rate() is None and "samples/s" not in head_text(m2, "live").plain
    back = ev.from_json(json.loads(json.dumps(told(0, 10, T, 48).to_json())))
    assert back.samples == 48
    old = {k: v for k, v in batched(0, 10, T).to_json().items() if k != "samples"}
    assert ev.from_json(old).samples is None


def test_samples_rate_formats():
    assert rate.fmt_samples_rate(640) == "640 samples/s"
    assert rate.fmt_samples_rate(3210) == "3.2k samples/s"
    assert rate.fmt_samples_rate(123_456) == "123k samples/s"
    assert rate.fmt_samples_rate(1_500_000) == "1.5M samples/s"
    assert rate.fmt_samples_rate(0.75) == "0.75 samples/s"


def test_console_summary_says_the_runs_samples_a_second_and_each_ranks_batch():
    t = rate.RunTally()
    for i in range(1, 11):
        t.progress(0, T + i, 10 * i, 32)
        t.progress(1, T + i, 10 * i, 32)
    assert t.line() == ("pace: 10.0 steps/s, 0.10 s/step (rank 0, the slowest, first step to last), "
                        "640 samples/s (all ranks, 32 a step each)")
    t.progress(2, T + 1, 1)
    t.progress(2, T + 10, 10)  # 1 step/s, its model told nothing
    assert t.line() == ("pace: 1.0 steps/s, 1.00 s/step (rank 2, the slowest, first step to last), "
                        "640 samples/s (2 of 3 ranks, 32 a step each)")


# ---- one step time: the engine's, whatever the read times say ------------------------------------------------
def test_panes_header_and_summary_show_the_engines_step_time_not_the_read_times():
    """Reads 1 s apart with 10 steps each would say 0.1 s a step; the engine timed them by the rank's clock at 0.05 s
    (the figure its slow-down verdict compares): the pane, the pace, the ETA and the console's summary say that."""
    import io

    from ddptui.tui.console import Console
    from ddptui.tui.screens.run import head_text
    from ddptui.tui.widgets.rank_pane import status_line
    m = started(world=1, steps=500)
    c = Console(out=io.StringIO(), color=False)
    for i in range(1, 4):
        e = batched(0, 10 * i, T + i)
        e = ev.Progress(e.rank, e.step, e.loss, e.wall, e.source, e.losses, None, 0.05 if i > 1 else None)
        m.apply([e])
        c.handle([e])
    assert m.rank(0).step_time == 0.05 and m.pace().step_time == 0.05
    assert status_line(m.rank(0), m.steps).startswith("step 30/500 50 ms/step")
    assert " · 20.0 steps/s · ETA 24s" in head_text(m, "live").plain  # 470 steps at 0.05 s
    assert c.tally.line({"0": {"step_time_s": 0.05}}) == "pace: 20.0 steps/s, 50 ms/step (rank 0, first step to last)"
    assert c.tally.line() == "pace: 10.0 steps/s, 0.10 s/step (rank 0, first step to last)"  # an older summary
