"""A node lost or frozen, decided without processes (fake clock): when the judge asks the job's nodes whether they still
answer (a victim's error; a rendezvous left waiting), what their answers make of the run (a node lost, its crash
verdict), a rank found stopped in the stall verdict, and the words of a Slurm teardown after a node was lost."""
from __future__ import annotations

import pytest

import json

from ddptui.runners import events as ev
from ddptui.runners.edge import node_probe
from ddptui.runners.evidence import slurm_state as ss
from ddptui.runners.judge.job_follow import STARTUP_ASK_AFTER, STARTUP_ASK_EVERY, NodeAnswer
from ddptui.runners.judge.judge import EXIT_FAILED, CollectStacks, ProbeNodes, TearDown
from ddptui.runners.evidence.stack_types import Frame, StackResult, ThreadStack
from tests.support.judge import W0, at, hello_on, job, make, of, say, texts

pytestmark = pytest.mark.any_python

RESET = ("RuntimeError: [../gloo/transport/tcp/pair.cc:537] Read error [198.18.0.2]:56984: Connection reset by peer. "
         "This is typically caused by a remote worker hanging")
UNREACHABLE = NodeAnswer("unreachable", "Communication connection failure", {})


def on_two_nodes(phase_of_rank0: str | None = None):
    """A judge whose Slurm job runs on n1, n2 (ad-hoc srun: a task per rank); rank 0 said hello on n1 at 1.5 s."""
    j = make()
    j.job_submitted("srun")
    at(j, 1)
    j.job_info(job("RUNNING", "", "n[1-2]"), ("n1", "n2"))
    hello_on(j, 0, "n1", dt=1.5)
    if phase_of_rank0:
        say(j, 0, 2, "@ddptui " + json.dumps({"k": "phase", "r": 0, "phase": phase_of_rank0}))
    return j


def exc(j, rank: int, dt: float, msg: str) -> None:
    say(j, rank, dt, "@ddptui " + json.dumps({"k": "exc", "r": rank, "type": "RuntimeError", "msg": msg,
                                               "where": "train.py:19", "tb": ["Traceback ...", msg]}), stream="err")


def training_on_two_nodes():
    j = on_two_nodes()
    hello_on(j, 1, "n2", dt=1.5)
    for r in (0, 1):
        say(j, r, 2, "step 3 loss 0.5")
    return j


# ---- a whole node gone: its ranks' peers fail first --------------------------------------------------------------
def test_a_victims_error_asks_the_other_nodes_before_the_teardown_and_the_lost_node_is_the_root_cause():
    j = training_on_two_nodes()
    exc(j, 0, 3, RESET)  # read before rank 0 has even exited
    out = j.watchdog([])
    assert of(out, ProbeNodes) == [ProbeNodes((("n2", (101,)),))] and not of(out, TearDown)
    at(j, 14)
    out = j.nodes_probed({"n2": UNREACHABLE})
    (lost,) = of(out, ev.NodeLost)
    assert (lost.node, lost.ranks) == ("n2", (1,))
    assert lost.why == ("its slurmd does not answer (srun: Communication connection failure), and rank 1 there is "
                        "gone (rank 0: Connection reset by peer)"), lost.why
    assert of(out, TearDown) == [TearDown("failed", EXIT_FAILED)]
    j.teardown_began("failed")
    at(j, 15)
    j.deaths([(100, W0 + 15, 1)], own=set())  # rank 0 exits 1 (srun says so too)
    at(j, 20)
    j.settle()
    out, status, code = j.conclude("failed", EXIT_FAILED)
    crash = j.crash
    assert (status, code) == ("failed", EXIT_FAILED)
    assert crash.text.startswith("node n2 lost (its slurmd does not answer") and crash.root_rank is None, crash.text
    assert ": the root cause; rank 0 failed after it (exit 1: Connection reset by peer); rank 1 lost with it" \
        in crash.text, crash.text
    assert (crash.victims, crash.exit, crash.stopped) == ((0,), "node lost", ())
    assert crash.outcomes == {0: "failed after node n2 was lost (exit 1: Connection reset by peer)",
                              1: "lost with node n2"}
    assert (j.tracks[1].status, j.tracks[1].outcome) == ("killed", "lost with node n2")
    assert of(out, ev.CrashVerdict) == [crash]


def test_a_victim_whose_peers_node_answers_stays_the_crash_and_the_job_ends_next():
    j = training_on_two_nodes()
    exc(j, 0, 3, RESET)
    assert of(j.watchdog([]), ProbeNodes)
    out = j.nodes_probed({"n2": NodeAnswer("answered", "", {101: "gone"})})
    assert not of(out, ev.NodeLost)
    assert texts(out) == ["ddptui: asked n2 through srun whether it still answers (rank 0 lost its peer): it does "
                          "(rank 1: gone)"], texts(out)
    j.deaths([(100, W0 + 4, 1)], own=set())
    out = j.watchdog([])
    assert of(out, TearDown) and "ending the Slurm job now" in "\n".join(texts(out))
    assert not of(j.watchdog([]), ProbeNodes)  # asked once


def test_a_rank_that_failed_on_its_own_is_the_cause_nothing_is_asked():
    j = training_on_two_nodes()
    exc(j, 1, 3, "ValueError: bad batch")
    j.deaths([(101, W0 + 3, 1)], own=set())
    out = j.watchdog([])
    assert not of(out, ProbeNodes) and of(out, TearDown)


def test_without_slurm_nothing_is_asked():
    j = make()
    hello_on(j, 0, "node0")
    hello_on(j, 1, "node1")
    exc(j, 0, 3, RESET)
    assert not of(j.watchdog([]), ProbeNodes)


# ---- a node lost during start-up ---------------------------------------------------------------------------------
def test_a_node_with_no_rank_at_the_rendezvous_is_asked_once_a_rank_waits_there_and_is_lost_if_it_does_not_answer():
    j = on_two_nodes("rendezvous")  # rank 0 waits from 2 s; rank 1 never said a word
    at(j, 2 + STARTUP_ASK_AFTER - 0.1)
    assert not of(j.watchdog([]), ProbeNodes)
    at(j, 2 + STARTUP_ASK_AFTER + 0.1)
    assert of(j.watchdog([]), ProbeNodes) == [ProbeNodes((("n2", ()),))]  # n1 has rank 0 at the rendezvous
    at(j, 2 + STARTUP_ASK_AFTER + 1)
    assert not of(j.watchdog([]), ProbeNodes)  # not again at once
    out = j.nodes_probed({"n2": NodeAnswer("answered", "", {})})
    assert not of(out, ev.NodeLost)
    assert texts(out) == ["ddptui: asked n2 through srun whether it still answers (rank 0 has waited 10 s in "
                          "the rendezvous): it does"], texts(out)
    at(j, 2 + STARTUP_ASK_AFTER + STARTUP_ASK_EVERY + 0.2)
    assert of(j.watchdog([]), ProbeNodes) == [ProbeNodes((("n2", ()),))]
    out = j.nodes_probed({"n2": NodeAnswer("unreachable", "no task started there within 10 s", {})})
    (lost,) = of(out, ev.NodeLost)
    assert (lost.node, lost.ranks) == ("n2", (1,))
    assert lost.why == ("its slurmd does not answer (srun: no task started there within 10 s), while rank 0 waits for "
                        "rank 1 in the rendezvous (not heard from yet)"), lost.why
    assert of(out, TearDown)
    assert not of(j.check(), ev.StallDetected)  # 33 s in: no stall to wait for (startup_grace 60 s)


def test_a_healthy_start_asks_no_node():
    j = on_two_nodes("rendezvous")
    hello_on(j, 1, "n2", dt=8)
    say(j, 1, 9, "@ddptui " + json.dumps({"k": "phase", "r": 1, "phase": "rendezvous"}))
    for dt in range(10, 40):
        at(j, dt)
        assert not of(j.watchdog([]), ProbeNodes), dt
    k = make()  # not under Slurm: nothing to ask through
    hello_on(k, 0, "node0")
    say(k, 0, 2, "@ddptui " + json.dumps({"k": "phase", "r": 0, "phase": "rendezvous"}))
    at(k, 30)
    assert not of(k.watchdog([]), ProbeNodes)


def test_a_node_srun_cannot_ask_is_said_not_lost():
    j = on_two_nodes("rendezvous")
    at(j, 2 + STARTUP_ASK_AFTER + 0.1)
    assert of(j.watchdog([]), ProbeNodes)
    out = j.nodes_probed({"n2": NodeAnswer("unknown", "srun on n2 failed: Job/step already completing", {})})
    assert not of(out, ev.NodeLost) and not of(out, TearDown)
    assert texts(out) == ["ddptui: asked n2 through srun whether it still answers (rank 0 has waited 10 s in "
                          "the rendezvous): could not tell (srun on n2 failed: Job/step already completing)"], texts(out)


# ---- a rank found stopped ------------------------------------------------------------------------------------------
def test_a_stopped_rank_is_named_the_culprit_not_its_missing_dump_or_py_spys_error():
    j = make("stall_after=10", "startup_grace=1", "on_stall=dump")
    hello_on(j, 0, "node0", dt=0)
    hello_on(j, 1, "node1", dt=0)
    for r in (0, 1):
        say(j, r, 1.0, "step 10 loss 0.3")
    at(j, 12.0)
    (req,) = of(j.check(), CollectStacks)
    sp = "/venv/lib/python3.11/site-packages"
    results = {
        0: StackResult(0, 100, "py-spy", [ThreadStack("MainThread", 1, True, [
            Frame("all_reduce", f"{sp}/torch/distributed/distributed_c10d.py", 3252, "work.wait()"),
            Frame("<module>", "/work/train.py", 18, "dist.all_reduce(t)")])]),
        1: StackResult(1, 101, "unavailable: the process is stopped (State: T (stopped))", state="T (stopped)"),
    }
    at(j, 13.0)
    hv = of(j.stacks_collected(req, results, "runs/x/stacks/01-stall"), ev.HangVerdict)[0]
    assert hv.text.startswith("rank 1 (node1) is stopped (SIGSTOP: state T), every other rank waits for it: rank 0 "
                              "waits in all_reduce at train.py:18 since "), hv.text
    assert (hv.culprits, hv.waiting) == ((1,), (0,))
    assert "ptrace" not in hv.text and "Flight Recorder" not in hv.text
    assert hv.fix.startswith("`kill -CONT 101` on node1 resumes rank 1; find what stopped it"), hv.fix


def test_stopped_words_and_several_stopped_ranks():
    from ddptui.runners.judge import run_verdicts as rv
    assert rv.stopped_words("t (tracing stop)") == "held by a debugger or tracer (state t: tracing stop)"
    text, culprits, waiting = rv.with_stopped({1: "T (stopped)", 2: "T (stopped)"}, {}, "old", (), (0,), {}, {}, W0)
    assert text == "ranks 1, 2 are stopped (SIGSTOP: state T); old" and culprits == (1, 2) and waiting == (0,)
    assert rv.with_stopped({}, {}, "old", (3,), (0,), {}, {}, W0) == ("old", (3,), (0,))


# ---- Slurm's words for teardown and the probe -----------------------------------------------------------------
def test_released_words_say_what_teardown_waited_for():
    assert ss.released_words("job 7", 4.26, [], (), set(), None) == \
        "ddptui: job 7 ended 4.3 s after scancel (its launcher exited, Slurm holds nothing of it)"
    assert ss.released_words("job 7", 7.0, [], ("node1",), {"node1"}, "300 sec") == (
        "ddptui: its launcher exited 7.0 s after scancel; Slurm keeps job 7 COMPLETING on node1, lost, until it marks "
        "it down (SlurmdTimeout 300 sec): not waited for")
    assert ss.released_words("job 7", 20.0, ["srun"], ("node1",), set(), None) == \
        "ddptui: Slurm still holds job 7 on node1 20 s after scancel; srun still running"
    assert ss.released_words("job 7", 20.0, [], ("node0", "node1"), {"node1"}, None) == \
        "ddptui: Slurm still holds job 7 on node0, node1 20 s after scancel"
    assert ss.config_value("MinJobAge               = 300 sec\nSlurmdTimeout           = 300 sec\n",
                           "SlurmdTimeout") == "300 sec"
    assert ss.config_value("", "SlurmdTimeout") is None
    assert ss.step_nodes("5.0|other|n1\n5.1|ddptui-run|node[0-1]\n", "ddptui-run") == "node[0-1]"
    assert ss.step_nodes("5.0|other|n1\n", "ddptui-run") is None


def test_probe_answers_read_from_srun():
    err = ("srun: launching StepId=1.2 on host node1, 1 tasks: 0\n"
           "srun: error: Task launch for StepId=1.2 failed on node node1: Communication connection failure\n"
           "srun: error: Application launch failed: Communication connection failure\nsrun: Job step aborted\n")
    assert node_probe.answer("node1", 233, "", err, 10) == UNREACHABLE
    ok = node_probe.answer("node1", 0, "101 T (stopped)\n102 gone\n", "srun: launching StepId=1.3\n", 10)
    assert ok == NodeAnswer("answered", "", {101: "T (stopped)", 102: "gone"})
    silent = node_probe.answer("node1", None, "", "srun: launching StepId=1.4 on host node1, 1 tasks: 0\n", 10)
    assert (silent.status, silent.said) == ("unreachable", "no task started there within 10 s")
    gone = node_probe.answer("node1", 1, "", "srun: error: Unable to create step for job 1: Job/step already "
                                             "completing or completed\n", 10)
    assert gone.status == "unknown"


def test_probe_script_reads_states_here(tmp_path):
    """The command srun runs on the node, run here: states of real pids, "gone" for none."""
    import os
    import subprocess
    argv = node_probe.argv("srun", "1", "node1", [os.getpid(), 2 ** 22 + 12345])
    script = argv[argv.index("/bin/sh"):]
    got = node_probe.states(subprocess.run(script, capture_output=True, text=True, timeout=30).stdout)
    assert got[os.getpid()][:1] in ("R", "S") and got[2 ** 22 + 12345] == "gone", got
