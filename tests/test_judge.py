"""The run's decisions (runners/judge/judge.py) driven with synthetic inputs and a fake clock: no process, no sleep."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from ddptui.runners import events as ev
from ddptui.runners.evidence.hints import HintMatcher
from ddptui.runners.judge.judge import (CRASH_GRACE, EXIT_FAILED, EXIT_OK, EXIT_STALLED, CollectStacks, Judge, Launcher,
                                  TearDown)
from ddptui.runners.launch.profile.load import load_profile
from tests.support.judge import PIDS, T0, W0, at, hello, make, of, say, texts

pytestmark = pytest.mark.any_python

ROOT = Path(__file__).resolve().parent.parent
RECORD = ROOT / "tests" / "fixtures" / "records" / "crash"
GLOO_CLOSED = ("RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer "
               "[127.0.0.1]:9634. This is typically caused by a remote worker crashing.")  # a real torchrun run: rank 1 raised at step 8


def training(j: Judge, line: str = "epoch 1 step 3 loss 0.52", dt: float = 1.0) -> None:
    """Both ranks said hello and printed a training line."""
    for r in (0, 1):
        hello(j, r)
        say(j, r, dt, line)


def torchrun_lines() -> list[str]:
    """torchrun's own stderr lines, as that run's record kept them ("<time> err <line>")."""
    return [ln.split(" err ", 1)[1] for ln in (RECORD / "launcher.log").read_text().splitlines() if " err " in ln]


def raised(j: Judge, dt: float = 2.0) -> None:
    """Rank 1's uncaught exception on its stderr, as that run's record kept it."""
    lines = [ln.split(" err ", 1)[1] for ln in (RECORD / "rank1.log").read_text().splitlines() if " err " in ln]
    say(j, 1, dt, *[ln for ln in lines if "WorkerServer" not in ln], stream="err")


def end(j: Judge, dt: float, status=None, code=None, launcher_rc=1):
    at(j, dt)
    j.settle()
    return j.conclude(status, code, [Launcher("torchrun", launcher_rc)])


# ---- crash ordering, victims, together, stopped, never started ---------------------------------------------------
def test_root_cause_is_the_first_real_death_not_the_first_noticed():
    j = make()
    training(j)
    say(j, 1, 2.0, "RuntimeError: bad batch", stream="err")
    at(j, 3.0)
    j.deaths([(PIDS[0], W0 + 2.9, -11)], own=set())  # noticed first: rank 0 segfaulted...
    at(j, 3.2)
    j.deaths([(PIDS[1], W0 + 2.0, 1)], own=set())  # ...but rank 1 had died 0.9 s before it
    _, status, code = end(j, 4.0)
    assert (status, code) == ("failed", EXIT_FAILED)
    assert j.crash.root_rank == 1 and j.crash.victims == (0,) and j.crash.together == ()
    assert j.crash.text.startswith("rank 1 failed first: exit 1 at step 3")
    assert j.tracks[0].outcome == "failed after rank 1 (SIGSEGV)"


def test_ranks_dying_within_half_a_second_failed_together():
    j = make()
    training(j)
    at(j, 3.0)
    j.deaths([(PIDS[0], W0 + 2.3, -6), (PIDS[1], W0 + 2.0, -6)], own=set())
    end(j, 4.0)
    assert j.crash.root_rank == 1 and j.crash.together == (0,) and j.crash.victims == ()


def test_ranks_that_chose_their_exit_status_after_their_own_check_are_no_crash():
    """Both ranks finish, print their check's verdict and exit 3 (sys.exit(3)): the program's own status and its last
    words, never "failed first"; the run fails (exit 1) all the same, and every front end reads the same words."""
    j = make()
    training(j, "step 20 loss 0.40")
    say(j, 0, 2.0, "replicas differ: checksums [11, 12]", stream="err")
    say(j, 1, 2.0, "rank 1 done")
    at(j, 3.0)
    j.deaths([(PIDS[0], W0 + 2.5, 3), (PIDS[1], W0 + 2.4, 3)], own=set())
    outs, status, code = end(j, 4.0)
    assert (status, code) == ("failed", EXIT_FAILED) and j.crash is None and not of(outs, ev.CrashVerdict)
    own = j.summary(status, code, "runs/x", 4.0, 0.1, [], [])["own_exit"]
    assert own["text"] == ("ranks 0, 1 exited with status 3, the program's own (no exception, no signal: sys.exit or "
                           "os._exit) at step 20; rank 0's last words: 'replicas differ: checksums [11, 12]'")
    assert own["ranks"] == [0, 1] and own["codes"] == {0: 3, 1: 3}
    assert all(j.tracks[r].outcome == "exited 3: its own exit status, no exception" for r in (0, 1))
    assert "failed first" not in json.dumps(j.summary(status, code, "runs/x", 4.0, 0.1, [], []))


def test_a_rank_the_launcher_stops_as_its_peer_exits_3_is_stopped_not_a_crash():
    """torchrun SIGTERMs the other ranks as soon as one exits non-zero: rank 0, on its way out after the same check,
    is stopped by it; still no crash, and no rank "failed first"."""
    j = make()
    training(j, "step 5 loss 0.40")
    say(j, 1, 2.0, "rank 1 done")
    at(j, 3.0)
    j.deaths([(PIDS[1], W0 + 2.4, 3), (PIDS[0], W0 + 2.5, -15)], own=set())
    outs, status, code = end(j, 4.0)
    assert (status, code) == ("failed", EXIT_FAILED) and j.crash is None
    own = j.summary(status, code, "runs/x", 4.0, 0.1, [], [])["own_exit"]
    assert own["text"] == ("rank 1 exited with status 3, the program's own (no exception, no signal: sys.exit or "
                           "os._exit) at step 5; rank 1's last words: 'rank 1 done'; rank 0 stopped by the launcher "
                           "after rank 1 exited 3")
    assert (j.tracks[0].status, j.tracks[0].outcome) == ("killed", "stopped by the launcher after rank 1 exited 3")
    assert own["ranks"] == [1] and own["outcomes"] == {0: "stopped by the launcher after rank 1 exited 3",
                                                       1: "exited 3: its own exit status, no exception"}


def test_an_exception_or_a_peer_gone_is_still_a_crash_beside_an_own_exit():
    j = make()
    training(j, "step 5 loss 0.40")
    say(j, 0, 2.0, "Traceback (most recent call last):", "RuntimeError: Connection closed by peer", stream="err")
    at(j, 3.0)
    j.deaths([(PIDS[1], W0 + 2.0, 3), (PIDS[0], W0 + 2.5, 1)], own=set())
    end(j, 4.0)
    assert j.crash is not None and j.crash.root_rank == 1 and j.crash.victims == (0,)
    assert j.summary("failed", EXIT_FAILED, "runs/x", 4.0, 0.1, [], [])["own_exit"] is None


@pytest.mark.parametrize("rss,evidence,code,words", [
    # RSS near the 1 GB limit and nothing else readable: "out of memory?", and less memory only "if" it was that
    (900_000_000, {}, "oom-kill-maybe", "killed by SIGKILL (out of memory? its RSS peaked at 900 MB (the ranks here "
                                        "together 1.0 GB), 90% of its memory cgroup's limit, 1.0 GB) at step 3"),
    # far below it: not memory, by the look of it
    (50_000_000, {}, "sigkill-not-oom", "killed by SIGKILL (not for memory by the look of it: its RSS peaked at 50 MB"),
    # the cgroup counted no kill: not the OOM killer, whatever the RSS
    (900_000_000, {"counted": 0}, "sigkill-not-oom", "killed by SIGKILL (not the OOM killer: its memory cgroup counted "
                                                     "no OOM kill during the run; its RSS peaked at 900 MB"),
])
def test_a_sigkills_memory_reading_comes_from_the_rss_samples_before_its_death(rss, evidence, code, words):
    from ddptui.runners.evidence.hints import HintMatcher
    from ddptui.runners.evidence.kill_reading import KillEvidence, Limit
    j = Judge(load_profile(ROOT / "profiles" / "cpu-ddp.yaml"), T0, W0, HintMatcher())
    j.begin(2, 1)
    training(j)
    for s in (1.0, 2.0):  # rank 1 grows, then its last sample; rank 0 holds 100 MB
        j.resources({0: (PIDS[0], T0 + s, 1.0, 100_000_000), 1: (PIDS[1], T0 + s, s, rss if s == 2.0 else rss // 2)})
    at(j, 3.0)
    j.deaths([(PIDS[1], W0 + 2.5, -9), (PIDS[0], W0 + 2.6, -15)], own=set())
    at(j, 4.0)
    j.settle()
    assert j.oom_suspects() == [PIDS[1]]
    outs, _, _ = j.conclude(None, None, [Launcher("torchrun", 1)],
                            {PIDS[1]: KillEvidence(limit=Limit(1_000_000_000, "its memory cgroup's limit"), **evidence)})
    assert j.crash.text.startswith(f"rank 1 failed first: {words}"), j.crash.text
    (hint,) = [h for h in of(outs, ev.HintRaised) if h.rank == 1]
    assert hint.code == code and hint.line.startswith("killed by SIGKILL (")
    assert ("lower the batch size" in hint.fix.lower()) == (code == "oom-kill-maybe")


def test_torchrun_log_gives_exit_codes_and_names_whom_it_stopped():
    """The death watch saw both deaths but could not read their exit codes; torchrun's own lines (from a real run's
    record) give them, and say it sent rank 0 SIGTERM: rank 0 was stopped by the launcher, not a victim."""
    j = make()
    training(j, "step 8 loss 11.2109")
    raised(j)
    at(j, 3.0)
    j.deaths([(PIDS[1], W0 + 2.0, None), (PIDS[0], W0 + 2.4, None)], own=set())
    assert j.tracks[1].returncode is None and j.tracks[1].status == "running"
    shown = say(j, None, 3.5, *torchrun_lines(), stream="err")
    assert j.tracks[1].returncode == 1 and j.tracks[0].returncode == -15 and j.tracks[0].signal == "SIGTERM"
    assert j.launcher_log.root_rank == 1
    assert any("ChildFailedError" in ln for ln in texts(shown))  # torchrun's lines are shown, not swallowed
    _, status, code = end(j, 4.0)
    assert j.crash.root_rank == 1 and j.crash.stopped == (0,) and j.crash.victims == ()
    assert j.tracks[0].status == "killed" and j.tracks[0].outcome == "stopped by the launcher after rank 1 failed"
    assert (status, code) == ("failed", EXIT_FAILED)


# torchrun's own lines when the rendezvous store it talks to went away with the node hosting it (a real run's, cut)
STORE_GONE = [
    "Traceback (most recent call last):",
    '  File "/venv/lib/python3.11/site-packages/torch/distributed/elastic/rendezvous/c10d_rendezvous_backend.py", '
    'line 114, in _call_store',
    "    return getattr(self._store, store_op)(*args, **kwargs)",
    "torch.distributed.DistNetworkError: failed to recv, got 0 bytes",
    "",
    "The above exception was the direct cause of the following exception:",
    "",
    "Traceback (most recent call last):",
    '  File "/venv/bin/torchrun", line 10, in <module>',
    "    sys.exit(main())",
    '  File "/venv/lib/python3.11/site-packages/torch/distributed/elastic/rendezvous/c10d_rendezvous_backend.py", '
    'line 116, in _call_store',
    "    raise RendezvousConnectionError(",
    "torch.distributed.elastic.rendezvous.api.RendezvousConnectionError: The connection to the C10d store has "
    "failed. See inner exception for details.",
]


def test_torchrun_failing_on_its_own_is_the_root_cause_of_the_ranks_it_stopped():
    """No rank failed: torchrun's agent lost its c10d store (on a node that died) and sent its ranks SIGTERM. Its
    own error is the crash verdict, and the ranks are stopped by it; its re-raise of a rank's failure never is."""
    j = make()
    training(j)
    say(j, None, 2.0, *[f"W1205 18:18:41.{400 + r}000 7000 torch/distributed/elastic/multiprocessing/api.py:1028] "
                        f"Sending process {PIDS[r]} closing signal SIGTERM" for r in (0, 1)], stream="err")
    say(j, None, 2.1, *STORE_GONE, stream="err")
    at(j, 3.0)
    j.deaths([(PIDS[0], W0 + 2.2, -15), (PIDS[1], W0 + 2.2, -15)], own=set())
    _, status, code = end(j, 4.0)
    assert (status, code) == ("failed", EXIT_FAILED)
    assert j.crash.text == ("torchrun failed on its own (RendezvousConnectionError: The connection to the C10d store "
                            "has failed. See inner exception for details.) and stopped ranks 0, 1")
    assert j.crash.root_rank is None and j.crash.stopped == (0, 1) and j.crash.excerpt[-1] == STORE_GONE[-1]
    assert j.tracks[0].outcome == "stopped by the launcher after it failed (RendezvousConnectionError)"
    j = make()  # the agent re-raising its ranks' failure (ChildFailedError) is theirs: no verdict of its own
    training(j)
    say(j, None, 2.0, *torchrun_lines(), stream="err")
    assert j.launcher_log.agent_error is None


def test_another_launchers_own_error_names_that_launcher_not_torchrun():
    """The launcher log is fed every launcher's stream: an error raised outside torchrun's code (a wrapper script
    that starts the ranks) is the named launcher's, and torchrun's agent error is told by its frames."""
    j = make()
    training(j)
    say(j, None, 2.0, "Traceback (most recent call last):", '  File "/opt/tools/launch_wrapper.py", line 40, in <module>',
        "    watch(children)", "RuntimeError: emulator image not found", stream="err")
    assert j.launcher_log.agent_error is not None and not j.launcher_log.agent_error.torchrun
    at(j, 4.0)
    j.settle()  # the ranks went with their launcher: no exit of theirs was seen
    _, status, _ = j.conclude(None, None, [Launcher("mirage", 1)])
    assert status == "failed"
    assert j.crash.text.startswith("the launcher mirage failed on its own (RuntimeError: emulator image not found)")
    j = make()
    say(j, None, 2.1, *STORE_GONE, stream="err")
    assert j.launcher_log.agent_error.torchrun


def test_a_rank_that_never_ran_is_never_started_not_a_victim():
    j = make()
    hello(j, 1)
    say(j, 1, 1.0, "epoch 1 step 1 loss 0.9")
    raised(j)
    j.tracks[0].pid = PIDS[0]  # torchrun started it (its pid is known) but its program never printed a thing
    at(j, 3.0)
    j.deaths([(PIDS[1], W0 + 2.0, 1)], own=set())
    j.lines(None, "err", [ln for ln in torchrun_lines() if "Sending process" in ln], W0 + 2.1, T0 + 2.1)
    j.deaths([(PIDS[0], W0 + 2.2, -15)], own=set())
    end(j, 4.0)
    assert j.crash.root_rank == 1 and j.crash.never_started == (0,) and j.tracks[0].outcome == "never started"


def test_completed_then_died_at_exit_is_not_a_failure():
    j = make("steps=3", "replica_check=false")
    for r in (0, 1):
        hello(j, r)
        say(j, r, 1.0, "epoch 1 step 3 loss 0.12")
        say(j, r, 1.1, "@ddptui " + json.dumps({"k": "digest", "r": r, "params": [["fc.weight", "9f0c"]]}))
    at(j, 2.0)
    j.deaths([(PIDS[0], W0 + 1.5, -6), (PIDS[1], W0 + 1.6, 0)], own=set())
    assert j.tracks[0].status == "exited" and j.tracks[0].outcome == "completed, then died at exit (SIGABRT)"
    _, status, code = end(j, 3.0)  # torchrun exits 1 over the abort: not a failure of the run
    assert j.crash is None and (status, code) == ("ok", EXIT_OK)


def test_process_exit_time_is_when_it_died_not_when_the_loop_noticed():
    j = make("runner=env", world=2)
    for r in (0, 1):
        j.process_started(PIDS[r], r)
        say(j, r, 1.0, "epoch 1 step 2 loss 0.7")
    at(j, 5.0)
    j.deaths([(PIDS[1], W0 + 2.0, None)], own={PIDS[0], PIDS[1]})
    j.process_exited("rank1", (1,), PIDS[1], 1, W0 + 4.9, launcher=False)
    assert j.tracks[1].exit_wall == W0 + 2.0 and j.tracks[1].status == "failed"


def test_a_peer_gone_in_a_run_ddptui_stopped_leaves_no_hint_to_find_a_crash():
    """Slurm's scancel or ddptui's teardown stops one rank a moment before the other, which says its peer closed the
    connection: no rank crashed, so the summary keeps no 'find the rank that failed first' hint (a CI run said it)."""
    j = make("timeout=60", "stall_after=1000")
    j.matcher = HintMatcher()
    training(j)
    at(j, 60.5)
    j.teardown_began("timeout")
    say(j, 1, 60.7, GLOO_CLOSED, stream="err")
    assert any(h["code"] == "peer-closed" for h in j.hints)
    at(j, 61.0)
    j.deaths([(PIDS[0], W0 + 60.6, -15), (PIDS[1], W0 + 60.8, -15)], own={PIDS[0], PIDS[1]})
    end(j, 62.0, "timeout", EXIT_FAILED)
    assert j.crash is None and [h["code"] for h in j.hints if h["code"] == "peer-closed"] == []


# ---- crash grace and timeout ----------------------------------------------------------------------------------
def test_survivors_get_the_crash_grace_then_a_teardown_is_asked():
    j = make()
    training(j)
    at(j, 2.0)
    j.deaths([(PIDS[1], W0 + 1.9, 1)], own=set())
    at(j, 2.0 + CRASH_GRACE - 0.1)
    assert of(j.check(), TearDown) == []
    at(j, 2.0 + CRASH_GRACE + 0.1)
    outs = j.check()
    assert of(outs, TearDown) == [TearDown("failed", EXIT_FAILED)]
    assert texts(outs) == [f"ddptui: a rank failed {CRASH_GRACE:g} s ago; tearing down survivors 0"]


def test_timeout_asks_for_a_teardown():
    j = make("timeout=60", "stall_after=1000")
    at(j, 59.0)
    assert of(j.check(), TearDown) == []
    at(j, 60.5)
    assert of(j.check(), TearDown) == [TearDown("timeout", EXIT_FAILED)]
    j.teardown_began("timeout")
    _, status, code = end(j, 62.0, "timeout", EXIT_FAILED)
    assert (status, code) == ("timeout", EXIT_FAILED) and j.crash is None
    assert {t.outcome for t in j.tracks.values()} == {"never started (stopped by ddptui at the run's timeout)"}


# ---- stall, startup grace, held, cleared -----------------------------------------------------------------------
def test_startup_grace_then_stall_then_stacks_then_on_stall_stop():
    j = make("stall_after=10", "startup_grace=30")
    for r in (0, 1):
        hello(j, r, 0.0)
    at(j, 20.0)  # 20 s quiet before any step: past stall_after, within the startup grace
    assert of(j.check(), ev.StallDetected) == []
    for r in (0, 1):
        say(j, r, 21.0, "epoch 1 step 1 loss 0.9")
    at(j, 30.0)
    assert of(j.check(), ev.StallDetected) == []
    at(j, 31.5)
    outs = j.check()
    stall = of(outs, ev.StallDetected)[0]
    assert stall.stalled == (0, 1) and stall.since == W0 + 21.0 and j.tracks[0].status == "stalled"
    req = of(outs, CollectStacks)[0]
    assert req == CollectStacks("stall", (0, 1), W0 + 21.0) and req.judged == "stall" and of(outs, TearDown) == []
    outs = j.stacks_collected(req, {}, "stacks/01-stall")  # no stack could be read
    assert of(outs, ev.HangVerdict)[0].text.startswith("ranks 0, 1 made no progress since")
    assert of(outs, TearDown) == [TearDown("stalled", EXIT_STALLED)]


def test_a_quiet_rank_busy_on_cpu_holds_the_stall_off():
    j = make("stall_after=10", "startup_grace=1")
    for r in (0, 1):
        hello(j, r, 0.0)
        say(j, r, 1.0, "epoch 1 step 1 loss 0.9")
    for s in range(5, 13):  # rank 1 burns a whole core while it prints nothing; rank 0 sleeps in a collective
        at(j, float(s))
        j.resources({0: (PIDS[0], T0 + s, 1.0, 10), 1: (PIDS[1], T0 + s, float(s), 10)})
    at(j, 12.0)
    assert j.busy_test_due()
    outs = j.check(cores=2, load=0.0)
    assert of(outs, ev.StallDetected) == [] and any("busy, not stalled" in t for t in texts(outs))
    assert texts(j.check(cores=2, load=0.0)) == []  # said once per hold


def test_a_rank_on_another_node_is_judged_without_cpu_evidence():
    j = make("stall_after=10", "startup_grace=1")
    for r in (0, 1):
        hello(j, r, 0.0)
        say(j, r, 1.0, "epoch 1 step 1 loss 0.9")
    for s in range(5, 13):  # rank 0 sleeps in a collective here; rank 1 runs on node1: never sampled
        at(j, float(s))
        j.resources({0: (PIDS[0], T0 + s, 1.0, 10)}, no_cpu={1: "runs on node1"})
    at(j, 12.0)
    outs = j.check(cores=2, load=0.0)
    stall = of(outs, ev.StallDetected)[0]
    assert stall.stalled == (0, 1)
    assert "no CPU evidence for rank 1 (runs on node1): judged by quiet time alone" in stall.reason
    assert [s.detail for s in of(outs, ev.RankState) if s.rank == 1] == [
        "no step or output for 11 s (stall_after 10 s), CPU not measured (runs on node1)"]


def test_a_stall_clears_when_a_step_arrives():
    j = make("stall_after=10", "startup_grace=1", "on_stall=wait")
    for r in (0, 1):
        hello(j, r, 0.0)
        say(j, r, 1.0, "epoch 1 step 1 loss 0.9")
    at(j, 12.0)
    outs = j.check()
    assert of(outs, ev.StallDetected) and of(outs, CollectStacks) == []  # wait: a verdict without stacks
    assert "press d / send SIGUSR1 for stacks" in of(outs, ev.HangVerdict)[0].text
    assert j.dump_requested() == [CollectStacks("on request", (0, 1), W0 + 1.0)]
    for r in (0, 1):
        say(j, r, 13.0, "epoch 1 step 2 loss 0.8")
    outs = j.check()
    assert of(outs, ev.StallCleared)[0].ranks == (0, 1) and j.stall_info is None
    assert [(s.rank, s.status, s.detail) for s in of(outs, ev.RankState)] == [
        (0, "running", "progressing again"), (1, "running", "progressing again")]
    assert j.dump_requested() == [CollectStacks("on request")]


# ---- slow-down and straggler -----------------------------------------------------------------------------------
def steps(j: Judge, rank: int, first: int, last: int, t: float, every: float) -> float:
    for s in range(first, last + 1):
        say(j, rank, t, f"epoch 1 step {s} loss {1.0 / s:.4f}")
        t += every
    return t


def test_a_rank_slower_than_its_own_first_steps_is_named_by_its_own_clock():
    j = make("stall_after=100", "steps=1000")
    for r in (0, 1):
        t = steps(j, r, 1, 22, 1.0, 0.1)
    steps(j, 0, 23, 30, t, 0.1)  # rank 0 keeps its pace
    t = steps(j, 1, 23, 27, t, 1.0)  # rank 1's steps take 10x its first ones
    at(j, t)
    outs = j.check()
    assert j.slow_info["ranks"] == [1] and of(outs, CollectStacks) == []
    assert [(s.rank, s.status) for s in of(outs, ev.RankState)] == [(1, "slow")]


def test_every_rank_slowed_in_lock_step_samples_stacks_at_most_three_times():
    j = make("stall_after=100", "steps=1000")
    for r in (0, 1):
        t = steps(j, r, 1, 22, 1.0, 0.1)
    for r in (0, 1):
        t2 = steps(j, r, 23, 27, t, 1.0)
    reqs = []
    for k in range(5):
        at(j, t2 + k * 1.5)
        outs = j.check()
        for req in of(outs, CollectStacks):
            assert req.judged == "slow" and {d.rank for d in req.slowed} == {0, 1}
            reqs.append(req)
            outs += j.stacks_collected(req, {}, f"stacks/0{len(reqs)}-slow")
    assert len(reqs) == 3
    assert j.slow_info["ranks"] == [0, 1] and "3 stack samples did not single one out" in j.slow_info["text"]
    assert j.hang is None  # a slow-down's samples never make the run's hang verdict


def test_lock_step_ranks_whose_lines_arrive_apart_are_not_named_one_alone():
    """Rank 1 sleeps in its step; rank 0 waits for it in the all-reduce: both slow down. Rank 0's batched line
    with 4 slow steps is read before rank 1's with the same steps: no rank may be named until both are in."""
    j = make("stall_after=100", "steps=1000")
    lines = {0: [], 1: []}
    for r in (0, 1):
        t = 50.0
        for s in range(1, 26):
            dt = 0.5 if s > 21 else 0.01
            t += dt
            lines[r].append("@ddptui " + json.dumps({"k": "loss", "r": r, "steps": [[s, 1.0 / s]], "at": [s, t],
                                                     "dt": [dt]}))
    say(j, 0, 2.0, *lines[0])
    say(j, 1, 2.0, *lines[1][:22])  # rank 1's last line so far ends at its first slow step
    at(j, 2.0)
    outs = j.check()
    assert j.slow_info is None and of(outs, CollectStacks) == [] and of(outs, ev.RankState) == []
    say(j, 1, 2.1, *lines[1][22:])
    at(j, 2.1)
    outs = j.check()
    assert j.slow_info is None  # every rank slowed together: stacks must tell which one's own work grew
    (req,) = of(outs, CollectStacks)
    assert req.judged == "slow" and {d.rank for d in req.slowed} == {0, 1}


def test_a_straggler_far_behind_the_lead_is_named():
    j = make("stall_after=100", "steps=1000")
    steps(j, 0, 1, 40, 1.0, 0.05)
    steps(j, 1, 1, 10, 1.0, 0.2)
    at(j, 4.0)
    j.check()
    # rank 1 last counted step 10 at 2.8 s; by then rank 0 had counted 37 (its 40th came at 2.95 s)
    assert j.slow_info["ranks"] == [1] and "far behind the other ranks (lead at step 37)" in j.slow_info["text"]


# ---- the public shape ------------------------------------------------------------------------------------------
def test_reports_are_taken_out_of_the_shown_lines_and_progress_is_coalesced():
    j = make()
    outs = say(j, 0, 1.0, "epoch 1 step 3 loss 0.52", "@ddptui " + json.dumps({"k": "hello", "r": 0, "pid": 7}),
               "epoch 1 step 4 loss 0.50")
    assert [o.lines for o in of(outs, ev.LogLines)] == [("epoch 1 step 3 loss 0.52", "epoch 1 step 4 loss 0.50")]
    assert of(outs, ev.RankHello)[0].pid == 7 and of(outs, ev.Progress) == []
    prog = j.progress()
    assert [(p.rank, p.step, p.loss) for p in prog] == [(0, 4, 0.50)] and j.progress() == []


def test_summary_holds_every_rank_and_the_verdicts():
    j = make()
    for r in (0, 1):
        hello(j, r)
    at(j, 2.0)
    j.deaths([(PIDS[1], W0 + 1.5, -11), (PIDS[0], W0 + 1.6, 0)], own=set())
    _, status, code = end(j, 3.0)
    s = j.summary(status, code, "runs/x", 3.0, 0.1, [], [])
    assert s["status"] == "failed" and s["crash"]["root_rank"] == 1 and s["ranks"][0]["status"] == "exited"
    assert json.loads(json.dumps(s))["ranks"]["1"]["returncode"] == -11 and s["own_exit"] is None


def test_a_ranks_node_comes_from_its_hello_into_the_event_and_the_summary_rows():
    j = make()
    outs = say(j, 0, 0.5, "@ddptui " + json.dumps({"k": "hello", "r": 0, "pid": 11, "host": "h0", "node": "node0",
                                                    "world": 2}))
    outs += say(j, 1, 0.5, "@ddptui " + json.dumps({"k": "hello", "r": 1, "pid": 12, "host": "h1", "world": 2}))
    assert [(h.rank, h.pid, h.host, h.node) for h in of(outs, ev.RankHello)] == [(0, 11, "h0", "node0"),
                                                                                 (1, 12, "h1", "h1")]  # older inject
    _, status, code = end(j, 3.0)
    rows = json.loads(json.dumps(j.summary(status, code, "runs/x", 3.0, 0.1, [], [])))["ranks"]
    assert [(rows[r]["node"], rows[r]["host"], rows[r]["pid"]) for r in "01"] == [("node0", "h0", 11), ("h1", "h1", 12)]


@pytest.mark.parametrize("why,first,words", [
    ("stalled", None, "stopped by ddptui after the stall"),
    ("failed", 1, "torn down by ddptui after rank 1 failed"),
    (None, None, "stopped by ddptui"),
])
def test_ranks_ddptui_stopped_say_why(why, first, words):
    j = make("stall_after=100")
    training(j)
    if first is not None:
        at(j, 2.0)
        j.deaths([(PIDS[first], W0 + 2.0, -11)], own=set())
    at(j, 3.0)
    j.teardown_began(why)
    at(j, 3.5)
    j.deaths([(PIDS[0], W0 + 3.4, -15)], own=set())
    assert j.tracks[0].status == "killed" and j.tracks[0].outcome == words
    if first is not None:  # a crash: its verdict says who stopped the survivor, as the rank's own end does
        end(j, 4.0, "failed", EXIT_FAILED)
        assert j.crash.stopped == (0,) and j.crash.outcomes[0] == words


def test_the_crash_verdict_says_who_stopped_each_rank_and_replays_from_old_records():
    j = make()
    training(j, "step 8 loss 11.2109")
    raised(j)
    at(j, 3.0)
    j.deaths([(PIDS[1], W0 + 2.0, None), (PIDS[0], W0 + 2.4, None)], own=set())
    say(j, None, 3.5, *torchrun_lines(), stream="err")
    outs, _, _ = end(j, 4.0)
    (crash,) = of(outs, ev.CrashVerdict)
    assert crash.outcomes == {1: "failed first (exit 1)", 0: "stopped by the launcher after rank 1 failed"}
    assert crash.outcomes == {r: t.outcome for r, t in j.tracks.items()}  # the same words as each rank's end
    s = json.loads(json.dumps(j.summary("failed", 1, "runs/x", 4.0, 0.1, [], [])))
    assert s["crash"]["outcomes"] == {"0": "stopped by the launcher after rank 1 failed", "1": "failed first (exit 1)"}
    from ddptui.runners.evidence.eventcheck import problem
    back = ev.from_json(json.loads(json.dumps(crash.to_json())))
    assert back == crash and problem(back) is None
    old = crash.to_json()
    del old["outcomes"]  # a record written before the field existed
    assert ev.from_json(old).outcomes == {} and problem(ev.from_json(old)) is None
    assert problem(ev.from_json({**crash.to_json(), "outcomes": {"0": 3}})).startswith("crash_verdict.outcomes")
    bad = ev.RunFinished("failed", 1, "s.json", W0, {"crash": {"text": "x", "outcomes": ["stopped"]}})
    assert problem(bad) == "summary.crash.outcomes: expected {rank: str, ...}"


def test_the_judge_reads_no_clock(monkeypatch):
    """The clock is an input: a whole crash run through torchrun's real lines decides with time.time() and
    time.monotonic() unusable."""
    import time

    def no_clock():
        raise AssertionError("the judge read the clock")
    j = make()
    monkeypatch.setattr(time, "time", no_clock)
    monkeypatch.setattr(time, "monotonic", no_clock)
    for r in (0, 1):
        hello(j, r)
        say(j, r, 1.0, "epoch 1 step 8 loss 11.2109")
    raised(j)
    at(j, 3.0)
    j.deaths([(PIDS[1], W0 + 2.0, None), (PIDS[0], W0 + 2.4, None)], own=set())
    say(j, None, 3.5, *torchrun_lines(), stream="err")
    j.check()
    j.progress()
    end(j, 4.0)
    assert j.crash.root_rank == 1
    j.summary("failed", 1, "runs/x", 4.0, 0.1, [], [])


def test_slow_down_by_the_ranks_own_clock_not_the_read_time():
    """Every report is read in one go (one engine time): only the ranks' own stamps (`at`, `dt`) can time them."""
    j = make("stall_after=100", "steps=1000")
    batch = {0: [], 1: []}
    for r in (0, 1):
        t = 50.0
        for s in range(1, 31):
            dt = 1.0 if (r == 1 and s > 24) else 0.01  # rank 1's last 6 steps take 100x its first ones
            t += dt
            batch[r].append("@ddptui " + json.dumps({"k": "loss", "r": r, "steps": [[s, 1.0 / s]], "at": [s, t],
                                                     "dt": [dt]}))
    for r in (0, 1):
        say(j, r, 2.0, *batch[r])
    at(j, 2.0)
    j.check()
    assert j.slow_info["ranks"] == [1] and "steps take 1.00 s, 100x its first 20 steps' 10 ms" in j.slow_info["text"]


def test_stall_stacks_name_the_rank_outside_the_collective():
    from ddptui.runners.evidence.stack_types import Frame, StackResult, ThreadStack
    sp, user = "/venv/lib/python3.11/site-packages", "/work/train.py"
    j = make("stall_after=10", "startup_grace=1", "on_stall=dump")
    for r in (0, 1):
        hello(j, r, 0.0)
        say(j, r, 1.0, "epoch 1 step 10 loss 0.3")
    at(j, 12.0)
    req = of(j.check(), CollectStacks)[0]
    assert j.stack_targets() == [(0, PIDS[0]), (1, PIDS[1])]
    results = {
        0: StackResult(0, PIDS[0], "py-spy", [ThreadStack("MainThread", 1, True, [
            Frame("all_reduce", f"{sp}/torch/distributed/distributed_c10d.py", 3252, "work.wait()"),
            Frame("main", user, 30, "dist.all_reduce(t)")])]),
        1: StackResult(1, PIDS[1], "py-spy", [ThreadStack("MainThread", 1, True, [
            Frame("wait_for_lock", user, 9, "lock.acquire()"), Frame("main", user, 28, "wait_for_lock()")])]),
    }
    at(j, 13.0)
    outs = j.stacks_collected(req, results, "runs/x/stacks/01-stall")
    hv = of(outs, ev.HangVerdict)[0]
    assert hv.culprits == (1,) and hv.waiting == (0,) and hv.path == "runs/x/stacks/01-stall" and j.hang is hv
    assert hv.where[0]["category"] == "collective" and texts(outs) == [f"ddptui: {hv.text}"]
    assert of(outs, TearDown) == []  # on_stall=dump: the run goes on


# ---- runners/judge/run_verdicts.py directly --------------------------------------------------------------------------
def test_run_verdicts_crash_gives_the_verdict_and_every_ranks_fate():
    from ddptui.runners.judge import run_verdicts
    from ddptui.runners.evidence.crash import RankEvidence
    evidence = [RankEvidence(0, -15, died_at=W0 + 2.3, started=True, stopped_by="launcher", step=8),
                RankEvidence(1, 1, died_at=W0 + 2.0, started=True, step=8,
                             err_lines=("RuntimeError: injected crash on rank 1 at step 8",)),
                RankEvidence(2, -15, died_at=W0 + 2.3, started=False, stopped_by="launcher")]
    crash, outcomes = run_verdicts.crash(evidence, 1, W0 + 5)
    assert (crash.root_rank, crash.stopped, crash.never_started, crash.wall) == (1, (0,), (2,), W0 + 5)
    assert outcomes[0] == ("killed", "stopped by the launcher after rank 1 failed")
    assert outcomes[2] == ("killed", "never started")
    assert run_verdicts.crash([RankEvidence(0, 0, died_at=W0, started=True)], None, W0) == (None, {})


def test_run_verdicts_hang_without_stacks_says_since_when_and_where_each_rank_was():
    import time as _time
    from ddptui.runners.judge import run_verdicts
    hv = run_verdicts.hang_without_stacks([0, 1], {0: 7, 1: 9}, W0, None, W0 + 30)
    since = _time.strftime("%H:%M:%S", _time.localtime(W0))
    assert hv.text == (f"ranks 0, 1 made no progress since {since} (rank 0 at step 7, rank 1 at step 9); "
                       "press d / send SIGUSR1 for stacks")
    assert (hv.culprits, hv.waiting, hv.where, hv.wall) == ((), (0, 1), {}, W0 + 30)
