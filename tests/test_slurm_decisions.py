"""Slurm's words read (runners/evidence/slurm_state.py) and what the judge decides from the job and the nodes
(runners/judge/job_follow.py), with synthetic inputs and a fake clock: no cluster, no process."""
from __future__ import annotations

import json

import pytest

from ddptui.runners import events as ev
from ddptui.runners.evidence import slurm_state as ss
from ddptui.runners.evidence.rank_learn import RankLearner, hello_rank
from ddptui.runners.judge.job_follow import AGENT_EXIT_GRACE, Agent, agent_lost_node, node_of_agent
from ddptui.runners.judge.judge import EXIT_FAILED, EXIT_OK, TearDown
from tests.support.judge import PIDS, T0, W0, at, hello, hello_on, job, make, of, say, texts

pytestmark = pytest.mark.any_python


# ---- slurm_state ---------------------------------------------------------------------------------------------
def test_sbatch_job_id_only_once_its_line_is_complete():
    assert ss.sbatch_job_id("") is None
    assert ss.sbatch_job_id("12") is None  # sbatch may still be writing it
    assert ss.sbatch_job_id("12\n") == "12"
    assert ss.sbatch_job_id("34;lab\nmore\n") == "34"
    assert ss.sbatch_job_id("sbatch: error: Batch job submission failed\n") is None


def test_squeue_line_of_the_job():
    out = "7|RUNNING|None|n[1-2]\n"
    assert ss.parse_squeue(out, "7") == ss.JobInfo("7", "RUNNING", "", "n[1-2]")
    assert ss.parse_squeue("8|PENDING|Resources|\n", "8") == ss.JobInfo("8", "PENDING", "Resources", "")
    assert ss.parse_squeue("", "7") is None
    assert ss.parse_squeue("70|RUNNING|None|n1\n", "7") is None


def test_scontrol_line_of_a_finished_job():
    line = ("JobId=9 JobName=ddptui-x UserId=root(0) GroupId=root(0) JobState=CANCELLED Reason=None "
            "Dependency=(null) ExitCode=0:15 RunTime=00:00:05 NodeList=n[1-2] BatchHost=localhost "
            "Command=/tmp/a b/job.sh StdOut=/tmp/out\n")
    info = ss.parse_scontrol(line, "9")
    assert info == ss.JobInfo("9", "CANCELLED", "", "n[1-2]", "0:15")
    assert ss.end_words(info) == "CANCELLED (exit 0:15)"
    assert ss.parse_scontrol("slurm_load_jobs error: Invalid job id specified\n", "9") is None
    pending = ss.parse_scontrol("JobId=3 JobState=PENDING Reason=Priority NodeList=(null)\n", "3")
    assert (pending.state, pending.reason, pending.nodelist) == ("PENDING", "Priority", "")


def test_step_found_by_its_name():
    out = "5.0|other\n5.1|ddptui-run\n"
    assert ss.parse_steps(out, "ddptui-run") == "5.1"
    assert ss.parse_steps(out, "nope") is None


def test_poll_often_while_waiting_rarely_while_running_and_teardown_waits_for_completing():
    assert ss.poll_interval(None) == ss.POLL_WAITING == ss.poll_interval("PENDING")
    assert ss.poll_interval("RUNNING") == ss.POLL_RUNNING > ss.POLL_WAITING
    assert not ss.gone(ss.JobInfo("1", "COMPLETING", "", "n1"))
    assert not ss.gone(ss.JobInfo("1", "RUNNING", "", "n1"))
    assert ss.gone(ss.JobInfo("1", "CANCELLED", "", "n1")) and ss.gone(None)


def test_job_state_said_once_per_change():
    j = make()
    j.job_submitted()
    at(j, 1)
    first = of(j.job_info(job("PENDING", "Priority")), ev.JobState)
    again = of(j.job_info(job("PENDING", "Priority")), ev.JobState)
    reason = of(j.job_info(job("PENDING", "Resources")), ev.JobState)
    running = of(j.job_info(job("RUNNING", "", "n[1-2]"), ("n1", "n2")), ev.JobState)
    assert [(e.state, e.reason) for e in first] == [("PENDING", "Priority")] and again == []
    assert [(e.state, e.reason) for e in reason] == [("PENDING", "Resources")]
    assert [(e.state, e.nodes) for e in running] == [("RUNNING", ("n1", "n2"))]


def test_a_pending_job_is_not_a_stall_and_startup_grace_counts_from_its_start():
    j = make("startup_grace=5", "stall_after=5")
    j.job_submitted()
    at(j, 0.5)
    j.job_info(job("PENDING", "Resources"))
    for dt in range(1, 60):  # a minute pending: far past every limit
        at(j, dt)
        assert not of(j.check(), ev.StallDetected), f"stall while pending at {dt} s"
    at(j, 60)
    j.job_info(job("RUNNING", "", "n1"), ("n1",))
    at(j, 63)
    assert not of(j.check(), ev.StallDetected)  # 3 s into the job
    at(j, 66)
    assert of(j.check(), ev.StallDetected)  # 6 s into the job, no rank said a word: now it is one


def test_without_a_job_the_same_silence_is_a_stall():
    j = make("startup_grace=5", "stall_after=5")
    at(j, 6)
    assert of(j.check(), ev.StallDetected)


def running_on_two_nodes():
    """A judge whose Slurm job runs on n1, n2, rank 0 on n1 and rank 1 on n2, at 2 s."""
    j = make()
    j.job_submitted()
    at(j, 1)
    j.job_info(job("RUNNING", "", "n[1-2]"), ("n1", "n2"))
    hello_on(j, 0, "n1", dt=1.5)
    hello_on(j, 1, "n2", dt=1.5)
    at(j, 2)
    return j


def test_node_fail_is_a_node_lost_and_a_teardown():
    j = running_on_two_nodes()
    out = j.job_info(job("NODE_FAIL", "NodeDown", "n[1-2]"), ("n1", "n2"), down=("n2",))
    lost = of(out, ev.NodeLost)
    assert [(e.node, e.ranks) for e in lost] == [("n2", (1,))] and "NODE_FAIL" in lost[0].why
    assert of(out, TearDown) == [TearDown("failed", EXIT_FAILED)]
    _, status, code = j.conclude(None, None)
    assert (status, code) == ("failed", EXIT_FAILED)
    assert j.crash is not None and j.crash.text.startswith("node n2 lost")
    s = j.summary(status, code, "/r", 1.0, 0.1, [], [])
    assert s["job"]["state"] == "NODE_FAIL" and s["nodes_lost"]["n2"]["ranks"] == [1]


def test_a_job_cancelled_by_someone_else_fails_the_run_ours_does_not_add_a_failure():
    for ours, want in ((False, ("failed", EXIT_FAILED)), (True, ("ok", EXIT_OK))):
        j = make()
        j.job_submitted()
        at(j, 1)
        j.job_info(job("RUNNING", "", "n1"), ("n1",))
        if ours:
            j.job_cancelling()
            j.teardown_began("stopped")
        out = j.job_info(job("CANCELLED", "", "n1", "0:15"))
        assert ("Slurm job 42 ended CANCELLED" in "\n".join(texts(out))) is not ours
        assert j.job.status("ok", EXIT_OK) == want
        assert j.summary("x", 1, "/r", 1.0, 0.1, [], [])["job"]["cancelled_by_ddptui"] is ours


# ---- a node lost: agents ---------------------------------------------------------------------------------------
def test_agent_lost_node_rule():
    assert node_of_agent("torchrun-node1") == "node1" and node_of_agent("torchrun") == ""
    assert node_of_agent("sbatch") == ""
    assert agent_lost_node(1, None, ranks_failed=False, others_running=True)
    assert not agent_lost_node(1, None, ranks_failed=True, others_running=True)  # a crash: its rank's error
    assert agent_lost_node(-9, "SIGKILL", ranks_failed=True, others_running=True)
    assert not agent_lost_node(0, None, ranks_failed=False, others_running=True)
    assert not agent_lost_node(1, None, ranks_failed=False, others_running=False)  # the last one: the run's end


def test_agent_gone_with_no_error_of_its_ranks_is_a_node_lost():
    j = make()
    hello_on(j, 0, "node1")  # c10d gave node1 rank 0, though the plan guessed rank 1
    hello_on(j, 1, "node0")
    at(j, 5)
    out = j.agent_exited("torchrun-node1", (1,), 1, None, others_running=True)
    lost = of(out, ev.NodeLost)
    assert [(e.node, e.ranks) for e in lost] == [("node1", (0,))]
    assert of(out, TearDown)


def test_agent_of_a_crashed_rank_is_not_a_node_lost():
    j = make()
    hello_on(j, 0, "node0")
    hello_on(j, 1, "node1")
    say(j, 1, 2, "@ddptui " + json.dumps({"k": "exc", "r": 1, "type": "RuntimeError", "msg": "x", "where": "a:1",
                                           "tb": []}))
    at(j, 3)
    assert not of(j.agent_exited("torchrun-node1", (1,), 1, None, others_running=True), ev.NodeLost)


def test_watchdog_tears_down_an_agent_that_outlives_the_failure():
    j = make()
    hello_on(j, 0, "node0")
    hello_on(j, 1, "node1")
    at(j, 2)
    j.state.first_failure = T0 + 2  # a rank failed (e.g. a gloo timeout after a partition)
    agents = [Agent("torchrun-node1", "node1", (1,))]
    at(j, 2 + AGENT_EXIT_GRACE - 1)
    assert j.watchdog(agents) == []
    at(j, 2 + AGENT_EXIT_GRACE + 1)
    out = j.watchdog(agents)
    assert [(e.node, e.ranks) for e in of(out, ev.NodeLost)] == [("node1", (1,))]
    assert of(out, TearDown) == [TearDown("failed", EXIT_FAILED)]
    assert j.watchdog(agents) == []  # once


def test_watchdog_waits_the_profiles_agent_exit_grace():
    j = make("agent_exit_grace=40")
    hello_on(j, 1, "node1")
    at(j, 2)
    j.state.first_failure = T0 + 2
    agents = [Agent("torchrun-node1", "node1", (1,))]
    at(j, 2 + 39)
    assert j.watchdog(agents) == []
    at(j, 2 + 41)
    assert [e.why for e in of(j.watchdog(agents), ev.NodeLost)] == [
        "its agent torchrun-node1 did not exit 40 s after the run failed"]


def test_watchdog_quiet_while_the_run_is_fine():
    j = make()
    at(j, 1000)
    assert j.watchdog([Agent("torchrun-node1", "node1", (1,))]) == []


# ---- ranks learned from the hello ----------------------------------------------------------------------------
def hello_line(rank):
    return "@ddptui " + json.dumps({"k": "hello", "r": rank, "pid": 1, "host": "h", "world": 2})


def test_hello_rank():
    assert hello_rank(["x", hello_line(3)]) == 3
    assert hello_rank(["@ddptui {\"k\": \"step\", \"r\": 1}"]) is None
    assert hello_rank(['@ddptui {"k": "hello", "r": "1"}']) is None


def test_folder_lines_held_until_the_hello_then_under_the_rank_it_names():
    ln = RankLearner(hold=5)
    assert ln.feed("a/0", 0, "err", ["warning before hello"], 0.0) == []
    got = ln.feed("a/0", 0, "out", [hello_line(1), "step 1"], 0.5)
    assert got == [(1, "err", ["warning before hello"]), (1, "out", [hello_line(1), "step 1"])]
    assert ln.feed("a/0", 0, "err", ["later"], 1.0) == [(1, "err", ["later"])]
    assert ln.feed("a/1", 1, "out", [hello_line(0)], 1.0) == [(0, "out", [hello_line(0)])]


def test_folder_without_hello_goes_out_under_the_guess_after_the_hold_and_a_late_hello_still_counts():
    ln = RankLearner(hold=5)
    assert ln.feed("a/0", 0, "err", ["ImportError"], 0.0) == []
    assert ln.due(4.9) == []
    assert ln.due(5.0) == [(0, "err", ["ImportError"])]
    assert ln.feed("a/0", 0, "err", ["more"], 6.0) == [(0, "err", ["more"])]
    assert ln.feed("a/0", 0, "out", [hello_line(1)], 7.0) == [(1, "out", [hello_line(1)])]
    assert ln.feed("a/0", 0, "err", ["after"], 8.0) == [(1, "err", ["after"])]


def test_release_at_the_end():
    ln = RankLearner()
    ln.feed("b/0", 1, "err", ["x"], 0.0)
    assert ln.release() == [(1, "err", ["x"])] and ln.release() == []


@pytest.mark.parametrize("n", [1])
def test_tailer_reattributes_both_files_of_a_folder(tmp_path, n):
    from ddptui.runners.edge.tail import Tailer
    d = tmp_path / "run" / "attempt_0" / "0"
    d.mkdir(parents=True)
    (d / "stderr.log").write_text("early warning\n")
    (d / "stdout.log").write_text("")
    t = Tailer()
    t.add(str(tmp_path / "run" / "attempt_*" / "0" / "stdout.log"), 0, "out", learn=True)
    t.add(str(tmp_path / "run" / "attempt_*" / "0" / "stderr.log"), 0, "err", learn=True)
    t.discover()
    assert t.poll() == []  # held: the folder has not said whose it is
    (d / "stdout.log").write_text(hello_line(1) + "\nloss 0.5\n")
    got = t.poll()
    assert [(r, s) for r, s, _ in got] == [(1, "err"), (1, "out")]
    t.close()


def test_tailer_names_the_file_of_a_learned_rank(tmp_path):
    from ddptui.runners.edge.tail import Tailer
    for lr in ("0", "1"):
        (tmp_path / "a" / lr).mkdir(parents=True)
    (tmp_path / "a" / "0" / "stdout.log").write_text(hello_line(1) + "\n")
    (tmp_path / "a" / "0" / "stderr.log").write_text("")
    t = Tailer()
    for lr, guess in (("0", 0), ("1", 1)):
        t.add(str(tmp_path / "a" / lr / "stdout.log"), guess, "out", learn=True)
        t.add(str(tmp_path / "a" / lr / "stderr.log"), guess, "err", learn=True)
    t.poll()
    assert t.learned_file(1, "err") == str(tmp_path / "a" / "0" / "stderr.log")
    assert t.learned_file(0, "err") is None  # folder 1 has said nothing: its guess is not taken for knowledge
    t.close()


def test_a_job_that_failed_before_our_scancel_took_says_failed_not_cancelled_by_us():
    j = make()
    j.job_submitted()
    at(j, 1)
    j.job_info(job("RUNNING", "", "n1"), ("n1",))
    j.teardown_began("failed")
    j.job_cancelling()  # the crash grace tore down while Slurm was already ending the job on its own
    j.job_info(job("FAILED", "NonZeroExitCode", "n1", "1:0"))
    s = j.summary("failed", 1, "/r", 1.0, 0.1, [], [])["job"]
    assert s["state"] == "FAILED" and s["cancelled_by_ddptui"] is False
    assert j.job.status("ok", EXIT_OK) == ("failed", EXIT_FAILED)


def test_a_rank_failure_under_a_slurm_job_ends_the_job_at_once():
    j = running_on_two_nodes()
    assert j.watchdog([Agent("sbatch", "", (0, 1))]) == []
    j.state.first_failure = T0 + 2  # rank 1 died (its death seen): no crash grace to wait out under Slurm
    out = j.watchdog([Agent("sbatch", "", (0, 1))])
    assert of(out, TearDown) == [TearDown("failed", EXIT_FAILED)]
    assert "ending the Slurm job now" in "\n".join(texts(out))
    assert j.watchdog([Agent("sbatch", "", (0, 1))]) == []  # once


def test_without_slurm_a_rank_failure_waits_for_the_crash_grace():
    j = make()
    hello_on(j, 0, "node0")
    hello_on(j, 1, "node1")
    at(j, 2)
    j.state.first_failure = T0 + 2
    assert j.watchdog([Agent("torchrun-node1", "node1", (1,))]) == []


def test_srun_saying_a_node_failed_is_a_node_lost():
    assert ss.node_failure("srun: error: Node failure on n2") == "n2"
    assert ss.node_failure("[rank 1] Node failure on my mind") is None
    j = make()
    j.job_submitted()
    hello_on(j, 0, "n1")
    hello_on(j, 1, "n2")
    out = say(j, None, 3, "srun: error: Node failure on n2", "srun: Job step aborted: Waiting up to 7 seconds")
    assert [(e.node, e.ranks, e.why) for e in of(out, ev.NodeLost)] == [("n2", (1,), "srun: node failure on n2")]
    assert not of(out, TearDown)  # lines bring events only (Session.ingest emits what they return)
    assert of(j.watchdog([]), TearDown)
    k = make()  # not under Slurm: a line that happens to say so is a line
    assert not of(say(k, None, 3, "srun: error: Node failure on n2"), ev.NodeLost)


def test_agent_whose_rank_died_first_is_a_crash_even_before_the_exit_code_is_known():
    j = make()
    hello_on(j, 0, "node0")
    hello_on(j, 1, "node1")
    at(j, 3)
    j.deaths([(101, W0 + 3, None)], own=set())  # rank 1 (pid 101) died; its parent reaped it before we read a code
    assert not of(j.agent_exited("torchrun-node1", (1,), 1, None, others_running=True), ev.NodeLost)


def test_srun_task_end_lines():
    assert ss.task_ends("srun: error: n2: task 1: Killed") == [(1, -9)]
    assert ss.task_ends("srun: error: n1: tasks 0-1,3: Exited with exit code 3") == [(0, 3), (1, 3), (3, 3)]
    assert ss.task_ends("srun: error: n1: task 0: Segmentation fault (core dumped)") == [(0, -11)]
    assert ss.task_ends("srun: error: Node failure on n2") == []
    assert ss.task_ends("srun: error: n2: task 1: Something new") == []


def test_srun_saying_a_task_was_killed_is_that_ranks_death_by_sigkill():
    j = make()
    j.job_submitted("srun")
    at(j, 1)
    j.job_info(job("RUNNING", "", "n[1-2]"), ("n1", "n2"))
    hello_on(j, 0, "n1", dt=1.5)
    hello_on(j, 1, "n2", dt=1.5)
    at(j, 3)
    j.deaths([(101, W0 + 3, None)], own=set())  # slurmstepd reaped it before its status could be read
    out = say(j, None, 3.2, "srun: error: n2: task 1: Killed")
    assert (j.tracks[1].returncode, j.tracks[1].signal, j.tracks[1].status) == (-9, "SIGKILL", "failed")
    assert [(e.rank, e.status) for e in of(out, ev.RankState)] == [(1, "failed")]
    k = make()  # launch torchrun: tasks are agents, not ranks
    k.job_submitted("torchrun")
    hello_on(k, 1, "n2")
    say(k, None, 3, "srun: error: n2: task 1: Killed")
    assert k.tracks[1].returncode is None


def test_a_node_lost_during_a_stall_is_a_failed_run_not_a_stalled_one():
    from ddptui.runners.judge.judge import EXIT_STALLED
    j = make()
    j.job_submitted()
    hello_on(j, 0, "node0")
    hello_on(j, 1, "node1")
    at(j, 40)
    j.node_lost("node1", (1,), "srun could not reach node1 for stacks (timed out)")
    assert j.job.status("stalled", EXIT_STALLED) == ("failed", EXIT_FAILED)
    assert j.job.status("stopped", EXIT_FAILED) == ("stopped", EXIT_FAILED)


# ---- a ddptui batch job: its record found from Slurm, its attempts (runners/judge/attempts.py) --------------
def test_the_record_of_a_ddptui_batch_job_is_read_from_its_name_and_stdout():
    from ddptui.runners.evidence.slurm_state import ddptui_record
    line = ("JobId=12 JobName=ddptui-20261205-1-slurm-ddp UserId=root(0) JobState=RUNNING "
            "StdErr=/shared/runs/20261205-1-slurm-ddp/slurm/batch.out StdOut=/shared/runs/20261205-1-slurm-ddp/slurm/batch.out")
    assert ddptui_record(line, "12") == "/shared/runs/20261205-1-slurm-ddp"
    assert ddptui_record(line, "13") is None
    assert ddptui_record(line.replace("JobName=ddptui-20261205-1-slurm-ddp", "JobName=mine"), "12") is None
    assert ddptui_record(line.replace("slurm/batch.out", "slurm-12.out"), "12") is None
    spaced = line.replace("/shared/runs/", "/shared/my runs/") + " StdIn=/dev/null Power="  # Slurm quotes no value
    assert ddptui_record(spaced, "12") == "/shared/my runs/20261205-1-slurm-ddp"
    assert ss.parse_scontrol(spaced, "12") == ss.JobInfo("12", "RUNNING", "", "", "", "")


def test_attempts_of_a_requeued_job_keep_the_earlier_ones_and_say_each_verdict():
    """Each engine of a requeued job (one per run of the batch script) builds the timeline as torchrun's restarts do
    (runners/judge/attempts.py): the earlier attempts from the record's last summary, then its own."""
    j0 = make()
    out = j0.requeued(0, "12", [], now=(T0, W0))
    assert of(out, ev.AttemptStarted) == [ev.AttemptStarted(0, "", W0)] and texts(out) == []
    hello(j0, 0)
    hello(j0, 1)
    say(j0, 1, 2.0, "Traceback (most recent call last):", '  File "train.py", line 9, in <module>',
        "RuntimeError: the data shard is not there yet", stream="err")
    at(j0, 2.1)
    j0.deaths([(PIDS[1], W0 + 2.0, 1)], own=set())
    at(j0, 10.0)
    j0.deaths([(PIDS[0], W0 + 9.5, -15)], own=set())
    j0.settle()
    out, status, code = j0.conclude(None, None)
    assert [(e.attempt, e.status) for e in of(out, ev.AttemptEnded)] == [(0, "failed")]
    assert j0.end_attempt(status) == []  # ended once: the run's end does not end it again
    first = j0.summary(status, code, "RUN", 10.0, 0.1, [], [])
    assert set(first) >= {"attempts"} and "restarts" not in first  # no launcher restarts in a batch job's engine
    assert [(a["attempt"], a["status"], a["why"], a["began"], a["ended"]) for a in first["attempts"]] == [
        (0, "failed", "", W0, W0 + 10.0)]
    assert "rank 1" in first["attempts"][0]["verdict"] and "data shard" in first["attempts"][0]["verdict"]

    j1 = make()
    out = j1.requeued(1, "12", json.loads(json.dumps(first["attempts"])) + ["junk"], now=(T0, W0 + 100))
    assert of(out, ev.AttemptStarted) == [ev.AttemptStarted(1, "Slurm requeued job 12", W0 + 100)]
    assert texts(out) == ["ddptui: Slurm requeued job 12: attempt 1 of this record"]
    at(j1, 130.0)
    ended = of(j1.end_attempt("preflight failed"), ev.AttemptEnded)  # a run that ended before its ranks started
    assert [(e.attempt, e.status, e.verdict) for e in ended] == [(1, "preflight failed", "")]
    both = j1.summary("preflight failed", 2, "RUN", 30.0, 0.1, [], [])["attempts"]
    assert [(a["attempt"], a["status"], a["why"]) for a in both] == [
        (0, "failed", ""), (1, "preflight failed", "Slurm requeued job 12")]
    again = make()  # attempt 1 again (its engine ran once more): one entry per attempt number
    again.requeued(1, "12", both, now=(T0, W0 + 200))
    at(again, 5.0)
    again.end_attempt("ok")
    assert [(a["attempt"], a["status"]) for a in again.summary("ok", 0, "RUN", 5.0, 0.1, [], [])["attempts"]] == [
        (0, "failed"), (1, "ok")]
