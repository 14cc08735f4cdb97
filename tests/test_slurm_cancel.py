"""A Slurm job cancelled from outside ddptui (someone's scancel, its time limit) is said to be that, by Slurm's own
record of who asked (slurmctld's log) and when (slurmstepd's line): its ranks were stopped by Slurm, not crashed; and
ddptui's own scancel is still ddptui's. Slurm's words parsed and the judge's decisions, with a fake clock."""
from __future__ import annotations

import time

import pytest

from ddptui.runners import events as ev
from ddptui.runners.evidence import slurm_state as ss
from ddptui.runners.judge.judge import EXIT_FAILED, TearDown
from ddptui.tui.console import Console
from tests.support.judge import PIDS, W0, at, hello, make, of, say, texts

pytestmark = [pytest.mark.any_python, pytest.mark.timeout(30)]


def slurm_at(dt: float) -> str:
    """The fake clock's wall time as Slurm writes it (its local time, to the second)."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(W0 + dt))


def stepd(dt: float, due: str = "", what: str = "STEP 42.0") -> str:
    return f"slurmstepd-n1: error: *** {what} ON n1 CANCELLED AT {slurm_at(dt)}" + (f" DUE TO {due}" if due else "") \
        + " ***"


# ---- what Slurm writes ---------------------------------------------------------------------------------------------
def test_slurmstepd_cancel_lines_read():
    c = ss.stepd_cancel("slurmstepd-n1: error: *** STEP 4.0 ON n1 CANCELLED AT 2026-12-04T19:32:02 ***")
    assert c == ss.Cancel("STEP 4.0", "n1", "2026-12-04T19:32:02", "")
    c = ss.stepd_cancel("slurmstepd: error: *** JOB 4 ON node0 CANCELLED AT 2026-12-04T19:32:02 DUE TO TIME LIMIT ***")
    assert (c.what, c.node, c.due) == ("JOB 4", "node0", "TIME LIMIT")
    assert ss.cancel_words("") == "cancelled" and ss.cancel_words("TIME LIMIT") == "ended at its time limit"
    node = ss.stepd_cancel("*** JOB 4 ON n2 CANCELLED AT 2026-12-04T19:32:02 DUE TO NODE FAILURE, SEE SLURMCTLD LOG "
                           "FOR DETAILS ***")
    assert ss.cancel_words(node.due) is None  # a node lost, not a cancel
    assert ss.stepd_cancel("step 10 loss 0.5") is None


def test_slurmctld_kill_requests_and_its_log_file():
    log = ("[2026-12-04T19:05:32.835] _slurm_rpc_kill_job: REQUEST_KILL_JOB JobId=1 uid 0\n"
           "[2026-12-04T19:05:33.001] _job_complete: JobId=1 done\n"
           "[2026-12-04T19:06:45.665] _slurm_rpc_kill_job: REQUEST_KILL_JOB JobId=12 uid 1000\n")
    assert ss.kill_requests(log, "1") == [("2026-12-04T19:05:32.835", 0)]
    assert ss.kill_requests(log, "12") == [("2026-12-04T19:06:45.665", 1000)]
    assert ss.slurm_time("2026-12-04T19:05:32.835") - ss.slurm_time("2026-12-04T19:05:32") == pytest.approx(0.835)
    assert ss.slurm_time("Unknown") is None
    conf = "SlurmctldHost  = localhost\nSlurmctldLogFile        = /tmp/x/slurmctld.log\nSlurmdLogFile = (null)\n"
    assert ss.config_value(conf, "SlurmctldLogFile") == "/tmp/x/slurmctld.log"
    assert ss.config_value(conf, "SlurmdLogFile") is None and ss.config_value(conf, "Nope") is None


def test_scontrol_says_when_the_job_ended():
    line = "JobId=9 JobState=CANCELLED Reason=None ExitCode=0:15 EndTime=2026-12-04T19:05:32 NodeList=n1\n"
    assert ss.parse_scontrol(line, "9").end == "2026-12-04T19:05:32"
    assert ss.parse_scontrol("JobId=9 JobState=RUNNING EndTime=Unknown NodeList=n1\n", "9").end == ""


# ---- the judge -----------------------------------------------------------------------------------------------------
def srun_job():
    """Two ranks under an srun (a task per rank) that ddptui follows, both training."""
    j = make()
    j.job_submitted("srun")
    at(j, 1)
    j.job_info(ss.JobInfo("42", "RUNNING", "", "n[1-2]"), ("n1", "n2"))
    for r in (0, 1):
        hello(j, r)
        say(j, r, 2.0, "step 3 loss 0.52")
    return j


def tasks_terminated(j, dt: float) -> None:
    """srun says both tasks ended by SIGTERM, and the death watch saw them die (what a scancel does to them)."""
    say(j, None, dt, "srun: error: n2: task 1: Terminated", "srun: error: n1: task 0: Terminated", stream="err")
    j.deaths([(PIDS[1], W0 + dt - 0.1, None), (PIDS[0], W0 + dt - 0.05, None)], own=set())


def test_ranks_stopped_by_a_cancel_from_outside_are_not_a_crash():
    j = srun_job()
    out = say(j, 0, 5.3, stepd(5.0), stream="err")  # slurmstepd writes it before it signals the tasks
    assert j.job.wants_canceller and not j.job.ours()
    out += j.job_canceller([(W0 + 5.02, 0, "root")], "/var/log/slurmctld.log")
    said = "\n".join(texts(out))
    assert "Slurm cancelled job 42, not ddptui (slurmstepd: STEP 42.0 ON n1 CANCELLED AT" in said, said
    assert "asked by uid 0 (root) (slurmctld's log)" in said
    tasks_terminated(j, 5.4)
    states = {(e.rank, e.status, e.detail) for e in of(j.state.take() + out, ev.RankState)}
    at(j, 5.6)
    checked = j.check()
    assert not of(checked, TearDown) and "a rank failed" not in "\n".join(texts(checked))
    words = f"stopped by Slurm: scancel by uid 0 (root) at {time.strftime('%H:%M:%S', time.localtime(W0 + 5.02))}"
    assert {t.status for t in j.tracks.values()} == {"killed"}, states
    assert {t.outcome for t in j.tracks.values()} == {words}
    at(j, 9.0)
    j.job_info(ss.JobInfo("42", "CANCELLED", "", "n[1-2]", "0:15", slurm_at(5.0)), ("n1", "n2"))
    j.settle()
    out, status, code = j.conclude(None, None)
    assert (status, code) == ("cancelled", EXIT_FAILED)
    assert j.crash is None and not of(out, ev.CrashVerdict)
    s = j.summary(status, code, "/r", 1.0, 0.1, [], [])
    assert s["job"]["cancelled_by_ddptui"] is False and s["job"]["cancelled_by"] == "uid 0 (root)"
    assert {r["outcome"] for r in s["ranks"].values()} == {words}


def test_deaths_read_before_slurmstepd_line_are_judged_again_and_nothing_is_torn_down():
    j = srun_job()
    tasks_terminated(j, 5.4)  # read first: srun's output came in before the rank's stderr file was read
    assert j.tracks[1].status == "failed"  # the first to die, of SIGTERM: a failure, as far as known then
    out = say(j, 0, 5.5, stepd(5.0), stream="err")
    out += j.job_canceller([], "slurmctld's log /var/log/slurmctld.log is not readable here (Permission denied)")
    killed = {e.rank: e.detail for e in of(out, ev.RankState) if e.status == "killed"}
    assert set(killed) == {0, 1}, out
    assert all(w.startswith("stopped by Slurm: job 42 cancelled at ") and w.endswith(", not by ddptui")
               for w in killed.values()), killed
    assert "who asked is not known here: slurmctld's log /var/log/slurmctld.log is not readable" in "\n".join(texts(out))
    at(j, 5.8)
    assert not of(j.check(), TearDown)
    j.settle()
    _, status, _ = j.conclude(None, None)
    assert status == "cancelled" and j.crash is None
    assert j.summary(status, 1, "/r", 1.0, 0.1, [], [])["job"]["cancelled_by"].startswith("not ddptui (who: ")


def test_a_death_with_no_exit_code_after_the_cancel_is_not_left_running():
    j = srun_job()
    say(j, 0, 5.3, stepd(5.0), stream="err")
    j.job_canceller([(W0 + 5.02, 0, "root")], "/log")
    j.deaths([(PIDS[0], W0 + 5.4, None)], own=set())  # srun was killed with the job: it said no code for rank 0
    assert j.tracks[0].status == "killed" and not j.tracks[0].alive
    at(j, 30.0)
    assert not of(j.check(), ev.StallDetected)


def test_ddptuis_own_scancel_is_still_ddptuis():
    j = srun_job()
    say(j, 1, 4.0, "RuntimeError: boom", stream="err")
    j.deaths([(PIDS[1], W0 + 4.0, 1)], own=set())
    at(j, 5.0)
    j.teardown_began("failed")
    j.job_cancelling()
    say(j, 0, 5.2, stepd(5.0), stream="err")  # the cancel ddptui's scancel caused, in the same second
    j.job_canceller([(W0 + 5.01, 0, "root")], "/log")
    assert j.job.ours() and not j.job.outside()
    j.deaths([(PIDS[0], W0 + 5.3, -15)], own=set())
    at(j, 9.0)
    j.job_info(ss.JobInfo("42", "CANCELLED", "", "n[1-2]", "0:15", slurm_at(5.0)), ("n1", "n2"))
    j.settle()
    _, status, _ = j.conclude(None, None)
    assert status == "failed" and j.crash.root_rank == 1 and j.crash.text.startswith("rank 1 failed first")
    assert j.tracks[0].outcome == "torn down by ddptui after rank 1 failed"
    s = j.summary(status, 1, "/r", 1.0, 0.1, [], [])
    assert s["job"]["cancelled_by_ddptui"] is True and s["job"]["cancelled_by"] == "ddptui"


def test_someone_elses_earlier_kill_request_wins_over_ddptuis_later_scancel():
    j = srun_job()
    at(j, 5.5)
    j.job_cancelling()  # ddptui also cancelled, half a second after someone else did
    say(j, 0, 5.6, stepd(5.0), stream="err")
    j.job_canceller([(W0 + 5.0, 1000, "alice"), (W0 + 5.5, 0, "root")], "/log")
    assert j.job.outside() and j.job.who() == "uid 1000 (alice)"


def test_a_rank_that_failed_by_itself_before_the_cancel_stays_the_root_cause():
    j = srun_job()
    say(j, 1, 3.0, "@ddptui " + '{"k": "exc", "r": 1, "type": "ValueError", "msg": "bad batch", "where": "t.py:9", '
        '"tb": []}')
    j.deaths([(PIDS[1], W0 + 3.1, 1)], own=set())
    say(j, 0, 6.3, stepd(6.0), stream="err")
    j.job_canceller([(W0 + 6.0, 0, "root")], "/log")
    j.deaths([(PIDS[0], W0 + 6.4, -15)], own=set())
    j.settle()
    _, status, _ = j.conclude(None, None)
    assert status == "failed" and j.crash.root_rank == 1, j.crash
    assert j.tracks[0].outcome.startswith("stopped by Slurm: scancel by uid 0 (root)")


def test_a_time_limit_is_slurms_not_a_crash_and_asks_for_no_canceller():
    j = srun_job()
    out = say(j, 0, 5.3, stepd(5.0, "TIME LIMIT", "JOB 42"), stream="err")
    assert not j.job.wants_canceller
    assert "Slurm ended at its time limit job 42, not ddptui" in "\n".join(texts(out))
    tasks_terminated(j, 5.4)
    j.settle()
    _, status, _ = j.conclude(None, None)
    assert status == "cancelled" and j.crash is None
    assert j.tracks[0].outcome.startswith("stopped by Slurm: job 42 ended at its time limit at ")


def test_the_console_says_who_cancelled_the_job(tmp_path):
    out = (tmp_path / "o").open("w+")
    summary = {"profile": "p", "runner": "slurm", "world_size": 1, "status": "cancelled", "ranks": {},
               "job": {"id": "12", "state": "CANCELLED", "end": "CANCELLED (exit 0:15)", "cancelled_by_ddptui": False,
                       "cancelled_by": "uid 0 (root)"}}
    Console(out, color=False).handle([ev.RunFinished("cancelled", 1, "/r/summary.json", W0, summary)])
    out.seek(0)
    text = out.read()
    assert "slurm job 12: CANCELLED (exit 0:15) (cancelled from outside ddptui: scancel by uid 0 (root))" in text
    assert "cancelled by ddptui" not in text and "status: cancelled (exit 1)" in text
