"""ddptui attach's decisions, without processes: a rank's liveness from its sampled frames, its output and CPU; the
root cause read from a dead rank's own traceback; what stop would do; the profile the judge sees."""
from __future__ import annotations

import pytest

from ddptui.runners import events as ev
from ddptui.runners.evidence.attach_evidence import traceback_report
from ddptui.runners.attach.find import AttachedJob, AttachedRank
from ddptui.runners.attach.output import RankOutput
from ddptui.runners.attach.liveness import Liveness, decide, frame_key, liveness_words
from ddptui.runners.attach.session import attach_profile, job_json, stop_words
from ddptui.runners.judge.judge import Judge
from ddptui.runners.evidence.stack_types import Frame, StackResult, ThreadStack

pytestmark = pytest.mark.any_python

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


# ---- a rank whose output cannot be read: the kernel's evidence (attach_sched), the words (attach_liveness.Seen) -----

def test_quiet_since_is_the_last_run_of_the_ranks_python_threads_only():
    from ddptui.runners.attach.sched import ThreadRun, quiet_since
    threads = {10: ThreadRun(10, "python3.11", "S", 100.0),  # MainThread, asleep in the user's wait since 100
               11: ThreadRun(11, "gloo_tcp_loop", "S", 299.5),  # gloo's own loop wakes all the time: no evidence
               12: ThreadRun(12, "python3.11", "S", 140.0)}  # a Python helper thread of the program's
    assert quiet_since(threads, {10, 12}, 300.0) == 140.0  # the latest of the program's own threads
    assert quiet_since(threads, {10}, 300.0) == 100.0
    running = {**threads, 12: ThreadRun(12, "python3.11", "R", 140.0)}
    assert quiet_since(running, {10, 12}, 300.0) == 300.0  # one runs now (or waits for a core): active
    in_io = {**threads, 10: ThreadRun(10, "python3.11", "D", 100.0)}
    assert quiet_since(in_io, {10}, 300.0) == 300.0  # writing a checkpoint is no stall
    assert quiet_since(threads, {99}, 300.0) is None  # no Python thread known: no dating
    assert quiet_since(None, {10}, 300.0) is None
    unknown = {10: ThreadRun(10, "python3.11", "S", None)}  # a kernel without /proc/PID/task/TID/sched
    assert quiet_since(unknown, {10}, 300.0) is None


def test_bytes_written_count_threads_seen_twice_only():
    from ddptui.runners.attach.sched import wrote_since
    assert wrote_since({1: 100, 2: 50}, {1: 160, 2: 50, 3: 9000}) == 60  # thread 3 is new: its past is not news
    assert wrote_since({1: 100, 2: 50}, {1: 100}) == 0  # a thread ended: its count went with it
    assert wrote_since(None, {1: 5}) == 0 and wrote_since({1: 5}, None) == 0


def test_this_kernel_says_when_a_sleeping_thread_last_ran(tmp_path):
    """The I/O edge on a real process: a child asleep for a while is dated to when it fell asleep."""
    import subprocess
    import sys
    import time

    from ddptui.runners.attach import sched as attach_sched
    if attach_sched.clock_offset() is None:
        import pytest
        pytest.skip("this kernel has no /proc/PID/task/TID/sched (CONFIG_SCHED_DEBUG)")
    # the child says its own monotonic time (the host's one clock) as it falls asleep
    child = subprocess.Popen([sys.executable, "-c", "import time; print(time.monotonic(), flush=True); time.sleep(60)"],
                             stdout=subprocess.PIPE, text=True)
    try:
        line = child.stdout.readline()
        fell = float(line)
        time.sleep(3.0)
        now = time.monotonic()
        threads = attach_sched.read(child.pid)
        since = attach_sched.quiet_since(threads, {child.pid}, now)
        # dated to when it fell asleep (it ran as it printed; its last moments after the print may wait for a core on
        # a loaded machine: seen 0.6 s late), not to now. Beside 6 busy loops on 2 vCPUs it was dated 0.8-0.9 s
        # before its print while the CPUs' steal times were 0.7 s apart, until `to_monotonic` put the steal back on
        assert since is not None and fell - 0.05 < since <= now - 2.0, (fell, now, since, threads)
        assert threads[child.pid].state == "S" and attach_sched.written(child.pid)[child.pid] >= len(line)
    finally:
        child.kill()
        child.wait()


def test_a_schedulers_date_gets_back_the_time_the_hypervisor_stole_from_its_cpu():
    """Each CPU's task clock leaves out its own steal: a thread dated on cpu 1 (22.8 s stolen) read from cpu 0 (22.1
    s stolen, in the offset) is 0.7 s early unless its CPU's steal goes back on."""
    from ddptui.runners.attach.sched import to_monotonic
    stolen = {0: 22.11, 1: 22.80}
    offset = 5000.0 - 4000.0 - stolen[0]  # monotonic 5000 when this thread (cpu 0) had exec_start 4000
    assert to_monotonic(3990.0, 0, offset, stolen) == pytest.approx(4990.0)
    assert to_monotonic(3989.31, 1, offset, stolen) == pytest.approx(4990.0)
    assert to_monotonic(3990.0, None, offset, {}) == pytest.approx(3990.0 + offset)


def test_what_a_headless_attach_says_of_each_rank_and_whom_it_waits_for():
    from ddptui.runners.attach.liveness import Seen, seen_words, waiting
    ok = Seen(0, True, True, 2, ("/u/train.py", 40, "step"), 0.9, how="it wrote 460 KB")
    asleep = Seen(1, True, False, 2, ("/u/train.py", 9, "wait_for_lock"), 0.0, asleep_since=0.0)
    same = Seen(2, True, False, 3, ("/u/train.py", 16, "<module>"), 0.08)
    unread = Seen(3, False, False, 0, None, None)
    assert waiting([ok, asleep, same, unread]) == [asleep, same, unread]
    assert seen_words(ok) == "rank 0 (output not readable): progressing (it wrote 460 KB)"
    assert seen_words(asleep).startswith("rank 1 (output not readable): asleep since ")
    assert seen_words(asleep).endswith(" (the kernel's scheduler), in wait_for_lock train.py:9, CPU 0 %")
    assert seen_words(same) == "rank 2 (output not readable): running, the same frame in 3 samples, in <module> " \
                               "train.py:16, CPU 8 %"
    assert seen_words(unread) == "rank 3: running, no stack sample readable"


def test_a_blind_ranks_stall_is_dated_from_the_kernel_and_said_so():
    """The judge: an attached rank whose output cannot be read is 'running, output not readable', not starting; dated
    quiet (its threads asleep for 200 s) makes the stall at once, in words that say what dated it; its steps are
    'cannot be read', not 'no step yet'."""
    from ddptui.runners.evidence.hang_verdict import _step
    p = attach_profile(job(), 30.0)
    j = Judge(p, 1000.0, 5000.0)
    j.begin(2, 1)
    for r in (0, 1):
        j.rank_found(r, 101 + r, "h", "h", 5000.0)
    out = j.rank_running(1, "output not readable")
    assert out == [ev.RankState(1, "running", "output not readable", 5000.0)] and j.tracks[1].status == "running"
    j.quiet_since(1, 800.0, 4800.0, "output not readable: its Python threads have not run since 12:00:00, the "
                                    "kernel's scheduler says")
    j.quiet_since(1, 900.0, 4900.0, "later: ignored")  # only ever earlier
    assert (j.tracks[1].last_progress, j.tracks[1].last_progress_wall) == (800.0, 4800.0)
    for t in (1000.0, 1001.0, 1002.0):  # idle CPU samples over the busy window
        j.tick(t, 4000.0 + t)
        j.resources({0: (101, t, 1.0, 1 << 20), 1: (102, t, 1.0, 1 << 20)})
    j.tick(1002.0, 5002.0)
    j.stack_moved(0, 1002.0, 5002.0)  # rank 0 shows progress: only rank 1 is quiet
    got = j.check(cores=2, load=0.5)
    stall = next(e for e in got if isinstance(e, ev.StallDetected))
    assert stall.stalled == (1,) and stall.since == 4800.0
    assert stall.reason == ("no sign of progress for 202 s (output not readable: its Python threads have not run "
                            "since 12:00:00, the kernel's scheduler says) (stall_after 30 s)")
    assert _step(j.state.steps(), 1) == "steps unreadable" and _step(j.state.steps(), 0) == "no step yet"
    j.tracks[1].saw_output(1003.0, 5003.0)  # a line after all: its quiet is its own again
    assert j.tracks[1].quiet_by == ""


def test_debug_server_addresses_from_the_store_and_the_ranks_own_torch():
    from ddptui.runners.attach.debug import fr_on, site_dir, store_answer
    maps = ("7f00-7f01 r-xp 0 08:01 5 /home/u/.venv/lib/python3.11/site-packages/torch/lib/libtorch_cpu.so\n"
            "7f02-7f03 r-xp 0 08:01 6 /usr/lib/x86_64-linux-gnu/libc.so.6\n")
    assert site_dir(maps) == "/home/u/.venv/lib/python3.11/site-packages" and site_dir("") == ""
    said = '{"0": "http://vm:44273", "1": "http://node7:47945", "x": "http://vm:1", "2": "ftp://vm:9"}\n'
    assert store_answer(said, {"vm", "localhost"}) == {0: "http://localhost:44273", 1: "http://node7:47945"}
    assert store_answer("Traceback ...\n", {"vm"}) == {} and store_answer("", {"vm"}) == {}
    assert fr_on({"TORCH_FR_BUFFER_SIZE": "2000"}) and fr_on({"TORCH_NCCL_TRACE_BUFFER_SIZE": "10"})
    assert not fr_on({}) and not fr_on({"TORCH_FR_BUFFER_SIZE": "0"}) and not fr_on({"TORCH_FR_BUFFER_SIZE": "x"})


def test_an_attached_stall_without_stacks_never_offers_sigusr1():
    from ddptui.runners.judge.run_verdicts import hang_without_stacks
    attached = hang_without_stacks((0, 1), {0: 3, 1: None}, 0.0, None, 1.0, attached=True).text
    assert attached.endswith("; press d for stacks (py-spy)") and "SIGUSR1" not in attached
    assert "send SIGUSR1" in hang_without_stacks((0,), {0: 3}, 0.0, None, 1.0).text  # a launched run's own ranks


def test_a_loop_spinning_in_one_function_does_not_move_a_training_step_does():
    """Progress by stack samples: the chain of functions, not the line: `while time.time() < end: x += 1` shows
    lines 25 and 26 of culprit_wait by turns, which is no progress; a training step passes through other functions."""
    from ddptui.runners.attach.liveness import motion_key
    spin_a = res(("culprit_wait", "/u/hang.py", 25), ("main", "/u/hang.py", 43))
    spin_b = res(("culprit_wait", "/u/hang.py", 26), ("main", "/u/hang.py", 43))
    assert frame_key(spin_a) != frame_key(spin_b) and motion_key(spin_a) == motion_key(spin_b)
    fwd = res(("forward", "/v/lib/python3.11/site-packages/torch/nn/modules/linear.py", 125), ("<module>", "/u/t.py", 14))
    bwd = res(("backward", "/v/lib/python3.11/site-packages/torch/_tensor.py", 630), ("<module>", "/u/t.py", 16))
    assert motion_key(fwd) != motion_key(bwd)
    lv = Liveness()
    assert lv.observe(1, 0.0, motion_key(spin_a), frame_key(spin_a)) is False
    assert lv.observe(1, 2.0, motion_key(spin_b), frame_key(spin_b)) is False  # spinning: not moved
    assert lv.frame(1) == ("/u/hang.py", 26, "culprit_wait") and lv.same_for(1, 4.0) == 4.0  # the newest frame shown
    assert motion_key(None) is None and motion_key(StackResult(0, 1, "unavailable: ptrace")) is None


def test_a_rank_started_with_torch_worker_server_socket_is_read_there(tmp_path):
    """`@worker_main` serves torch's debug server on the unix socket TORCH_WORKER_SERVER_SOCKET names: found from the
    process's environment (no store to read), and only where that socket exists."""
    import socket as so
    import subprocess
    import sys

    from ddptui.runners.attach.debug import find
    path = str(tmp_path / "r0.sock")
    srv = so.socket(so.AF_UNIX, so.SOCK_STREAM)
    srv.bind(path)
    procs = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                              env={"PATH": "/usr/bin:/bin", "RANK": str(r),
                                   "TORCH_WORKER_SERVER_SOCKET": path if r == 0 else str(tmp_path / "gone.sock")})
             for r in (0, 1)]
    try:
        got = find({0: procs[0].pid, 1: procs[1].pid}, 2, {"localhost"})
        assert got.addresses == {0: path}
        assert got.said == (f"rank 0 serves torch's debug server at {path} (TORCH_WORKER_SERVER_SOCKET): its stacks and "
                            "Flight Recorder records are read there (Flight Recorder is off in it: "
                            "TORCH_FR_BUFFER_SIZE is not set above 0)",)
    finally:
        for p in procs:
            p.kill()
            p.wait()
        srv.close()
