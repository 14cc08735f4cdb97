"""ddptui attach's decisions, without processes: a rank's liveness from its sampled frames, its output and CPU; the
root cause read from a dead rank's own traceback; what stop would do; the profile the judge sees."""
from __future__ import annotations

from ddptui.runners import events as ev
from ddptui.runners.attach_evidence import traceback_report
from ddptui.runners.attach_find import AttachedJob, AttachedRank, RankOutput
from ddptui.runners.attach_liveness import Liveness, decide, frame_key, liveness_words
from ddptui.runners.attach_session import attach_profile, job_json, stop_words
from ddptui.runners.judge import Judge
from ddptui.runners.stacks import Frame, StackResult, ThreadStack

LIB = "/v/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py"


def res(*frames, name="MainThread") -> StackResult:
    return StackResult(0, 10, "py-spy", [ThreadStack("ddptui-report", 2, True, [Frame("run", "/x/runners/inject/"
                                                                                       "ddptui_report.py", 5)]),
                                         ThreadStack(name, 1, True, [Frame(*f) for f in frames])])


def test_frame_key_is_the_main_threads_innermost_user_frame():
    r = res(("wait", LIB, 30), ("culprit_wait", "/home/u/train.py", 25), ("main", "/home/u/train.py", 40))
    assert frame_key(r) == ("/home/u/train.py", 25, "culprit_wait")
    assert frame_key(res(("wait", LIB, 30))) == (LIB, 30, "wait")  # no user frame: the innermost one
    assert frame_key(None) is None and frame_key(StackResult(0, 1, "unavailable: ptrace")) is None


def test_liveness_moves_only_when_the_frame_changes():
    lv = Liveness()
    a, b = ("/t.py", 10, "step"), ("/t.py", 12, "step")
    assert lv.observe(0, 0.0, a) is False  # the first sample is no evidence of movement
    assert lv.observe(0, 5.0, a) is False and lv.same_for(0, 12.0) == 12.0
    assert lv.observe(0, 15.0, None) is False and lv.frame(0) == a  # an unreadable sample changes nothing
    assert lv.observe(0, 20.0, b) is True and lv.same_for(0, 21.0) == 1.0
    assert lv.same_for(1, 3.0) is None


def test_decide_needs_quiet_output_the_same_frame_and_low_cpu():
    assert decide(quiet=1, same_frame=100, cpu=0.0, limit=10, busy=0.03) == "moving"  # output is news
    assert decide(quiet=30, same_frame=4, cpu=0.0, limit=10, busy=0.03) == "moving"  # its frame changed lately
    assert decide(quiet=30, same_frame=30, cpu=0.9, limit=10, busy=0.03) == "busy"  # one long call computing
    assert decide(quiet=30, same_frame=30, cpu=0.005, limit=10, busy=0.03) == "stalled"
    assert decide(quiet=30, same_frame=None, cpu=0.0, limit=10, busy=0.03) == "quiet"  # no frame sampled
    assert liveness_words(1, "stalled", 42.4, 0.4, 310_000_000, ("/h/hang.py", 25, "culprit_wait")) == \
        "rank 1 stalled (quiet 42 s, CPU 0 %, RSS 310 MB, in culprit_wait hang.py:25)"


def test_traceback_report_from_a_ranks_own_stderr():
    lines = ["step 48 loss 0.1", "[rank1]: Traceback (most recent call last):",
             '[rank1]:   File "/home/u/train.py", line 29, in <module>', "[rank1]:     main()",
             '[rank1]:   File "/home/u/train.py", line 19, in main', "[rank1]:     raise RuntimeError(f'x')",
             "[rank1]: RuntimeError: rank 1 gave up at step 49"]
    rep = traceback_report(lines)
    assert rep["type"] == "RuntimeError" and rep["msg"] == "rank 1 gave up at step 49"
    assert rep["where"] == "/home/u/train.py:19" and rep["tb"][0] == "Traceback (most recent call last):"
    plain = ["Traceback (most recent call last):", '  File "/a.py", line 3, in <module>',
             "    import nothing", "ModuleNotFoundError: No module named 'nothing'"]
    assert traceback_report(plain)["type"] == "ModuleNotFoundError"
    assert traceback_report(["step 3", "Killed"]) is None
    assert traceback_report(plain[:3]) is None  # cut before its last line: no exception to name


def job(kind="torchrun", launcher=100, slurm=None) -> AttachedJob:
    out = RankOutput("file", "/tmp/r0.log", "")
    term = RankOutput("terminal", None, "writes to terminal /dev/pts/3: ddptui cannot read it")
    ranks = {0: AttachedRank(0, 0, 2, 101, "h", "h", out, out), 1: AttachedRank(1, 1, 2, 102, "h", "h", term, term)}
    return AttachedJob("100", kind, launcher, ("torchrun", "train.py"), ranks, (), slurm, 2)


def test_stop_goes_through_the_jobs_own_launcher_only():
    assert stop_words(job())[1] == 100 and "torchrun's agent (pid 100)" in stop_words(job())[0]
    assert stop_words(job(slurm="88"))[1] == ["scancel", "88"]
    words, how = stop_words(job(kind="spawn", launcher=55))
    assert how == 55 and "spawned the ranks (pid 55)" in words
    words, how = stop_words(job(kind="env", launcher=None))
    assert how is None and "never signals ranks one by one" in words


def test_the_judge_sees_the_attached_ranks_as_hellos():
    p = attach_profile(job(), 7.0)
    assert (p.name, p.runner, p.world_size, p.stall_after, p.on_stall) == ("attach-100", "attach", 2, 7.0, "dump")
    j = Judge(p, 0.0, 1000.0)
    j.begin(2, 1)
    out = j.rank_found(1, 102, "h", "h", 1000.0)
    assert out == [ev.RankHello(1, 102, "h", 2, 1000.0, node="h")] and j.tracks[1].pid == 102
    j.tick(20.0, 1020.0)
    j.stack_moved(1, 20.0, 1020.0)  # its frame changed: the stall clock starts over, as with a line
    assert j.tracks[1].last_progress == 20.0
    assert job_json(job())["ranks"][1]["stdout"]["kind"] == "terminal"
