"""Crash root cause: the pure verdict (runners/evidence/crash.py), torchrun's own lines, OOM evidence, the death watch, and
real runs where a rank dies without a Python exception (SIGKILL, segfault, os._exit) under torchrun and env://."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from ddptui.runners import events as ev
from ddptui.runners.evidence.crash import RankEvidence, decide, ended_by_our_stop, excerpt, exit_words, kind, stopped_words
from ddptui.runners.edge.deathwatch import DeathWatch, parse_stat_exit
from ddptui.runners.evidence.launcher_log import TorchrunLog, error_file_report
from ddptui.runners.evidence.kill_reading import KillEvidence, Limit, read_kill
from ddptui.runners.edge.oom import cgroup_paths, kernel_log_kills, limit_files, memory_limit, parse_limit, parse_oom_kill
from ddptui.runners.session import EXIT_FAILED, EXIT_STALLED
from tests.support.engine import run_profile
from tests.support.wait import WaitTimeout, wait_until

pytestmark = pytest.mark.main_suite("its wrapped torchrun runs on the test's own interpreter")

FIXTURES = Path(__file__).resolve().parent / "fixtures"
T0 = 1_700_000_000.0
GLOO_CLOSED = ("RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer "
               "[127.0.0.1]:9634. This is typically caused by a remote worker crashing.")
SEGV_DUMP = [
    "Fatal Python error: Segmentation fault",
    "",
    "Thread 0x00007f052b4ff6c0 (most recent call first):",
    '  File "/usr/lib/python3.11/threading.py", line 331 in wait',
    '  File "/work/runners/inject/ddptui_report.py", line 139 in _flush_quiet',
    "",
    "Current thread 0x00007f05533d8b80 (most recent call first):",
    '  File "/usr/lib/python3.11/ctypes/__init__.py", line 519 in string_at',
    '  File "/work/train.py", line 22 in die',
    '  File "/work/train.py", line 43 in main',
    "",
    "Extension modules: numpy._core._multiarray_umath, torch._C (total: 2)",
]


# ---- the pure verdict ---------------------------------------------------------------------------------------

def test_sigkilled_rank_is_the_root_cause_not_the_rank_the_launcher_stopped():
    # what torchrun does: rank 1 is SIGKILLed, torchrun notices and SIGTERMs rank 0; rank order says nothing
    v = decide([RankEvidence(0, -15, died_at=T0 + 0.08, stopped_by="launcher", step=6),
                RankEvidence(1, -9, died_at=T0, step=5, out_lines=("[rank 1] step 5 loss 0.2",))])
    assert v.root == 1 and v.what == "SIGKILL" and v.stopped == (0,) and v.victims == ()
    assert v.text.startswith("rank 1 failed first: killed by SIGKILL (sender unknown) at step 5")
    assert "rank 0 stopped by the launcher (SIGTERM) when rank 1 died" in v.text
    assert "failed after" not in v.text
    assert v.outcomes[0] == ("killed", "stopped by the launcher after rank 1 failed")
    assert v.outcomes[1][0] == "failed"


def test_a_rank_stopped_on_its_way_out_of_its_own_exception_failed_by_that_exception():
    # rank 1 raised; its peer exited first on the lost connection and torchrun SIGTERMed rank 1 before it had exited
    exc = {"type": "RuntimeError", "msg": "injected crash", "where": "train.py:40"}
    v = decide([RankEvidence(0, 1, died_at=T0 + 0.5, err_lines=(GLOO_CLOSED,), step=6),
                RankEvidence(1, -15, died_at=T0 + 0.6, error_at=T0, exc=exc, step=6, stopped_by="launcher")])
    assert v.root == 1 and v.what == "RuntimeError, then SIGTERM"
    assert v.text.startswith("rank 1 failed first (RuntimeError, then SIGTERM): RuntimeError: injected crash"), v.text
    assert exit_words(-15, None) == "SIGTERM" and exit_words(1, exc) == "exit 1" and exit_words(-11, exc) == "SIGSEGV"


def test_deaths_are_ordered_by_when_they_happened_not_by_rank():
    v = decide([RankEvidence(0, -6, died_at=T0 + 1.0), RankEvidence(1, -6, died_at=T0),
                RankEvidence(2, -6, died_at=T0 + 2)])
    assert v.root == 1 and v.victims == (0, 2)
    assert "rank 0 failed 1.00 s after it" in v.text and "rank 2 failed 2.00 s after it" in v.text


def test_a_victim_never_wins_even_when_its_error_was_read_first():
    # rank 0's "connection closed" traceback was read before rank 1's death was noticed
    v = decide([RankEvidence(0, 1, died_at=T0 + 0.3, error_at=T0 - 0.1, err_lines=(GLOO_CLOSED,),
                             exc={"type": "RuntimeError", "msg": GLOO_CLOSED, "where": "x.py:1"}),
                RankEvidence(1, -9, died_at=T0)])
    assert v.root == 1 and v.victims == (0,)
    assert "rank 0 failed 0.30 s after it (Connection closed by peer)" in v.text


def test_only_victims_left_names_the_earliest_and_says_its_peer_is_elsewhere():
    v = decide([RankEvidence(0, 1, died_at=T0 + 1, err_lines=(GLOO_CLOSED,)),
                RankEvidence(1, 1, died_at=T0, err_lines=(GLOO_CLOSED,))])
    assert v.root == 1 and v.victims == (0,) and "not one of the ranks watched here" in v.text


def test_simultaneous_own_failures_are_not_called_failed_after_it():
    exc = {"type": "ValueError", "msg": "bad batch", "where": "train.py:9"}
    v = decide([RankEvidence(0, 1, died_at=T0 + 0.1, error_at=T0 + 0.05, exc=exc),
                RankEvidence(1, 1, died_at=T0 + 0.2, error_at=T0, exc=exc)])
    assert v.root == 1 and v.together == (0,) and v.victims == ()
    assert "rank 0 failed at the same moment on its own" in v.text and "after it" not in v.text
    assert v.outcomes[0] == ("failed", "failed at the same moment as rank 1 (exit 1)")


def test_sigkill_with_oom_evidence_says_out_of_memory():
    oom = read_kill(42, KillEvidence(log_names=True), None, None)
    v = decide([RankEvidence(1, -9, died_at=T0, kill=oom)])
    assert "killed by SIGKILL (out of memory: the kernel log says the OOM killer killed pid 42)" in v.text
    assert v.outcomes[1] == ("failed", "failed first (killed by SIGKILL (out of memory))")


def test_sigkill_sent_by_ddptui_is_not_out_of_memory():
    v = decide([RankEvidence(0, 1, died_at=T0, exc={"type": "KeyError", "msg": "'x'", "where": "a.py:3"}),
                RankEvidence(1, -9, died_at=T0 + 6, stopped_by="ddptui")])
    assert v.root == 0 and v.stopped == (1,) and "out of memory" not in v.text
    assert "rank 1 torn down by ddptui (SIGKILL) when rank 0 had failed" in v.text


def test_segfault_names_the_crashing_thread_frame_and_keeps_its_dump_only():
    v = decide([RankEvidence(1, -11, died_at=T0, err_lines=tuple(SEGV_DUMP), step=5),
                RankEvidence(0, -15, died_at=T0 + 0.1, stopped_by="launcher")])
    assert v.root == 1 and v.what == "SIGSEGV"
    assert "SIGSEGV (segmentation fault) at step 5: Fatal Python error: Segmentation fault in die at train.py:22" \
        in v.text
    assert v.excerpt[0] == "Fatal Python error: Segmentation fault"
    assert v.excerpt[1].startswith("Current thread") and not any("Extension modules" in x for x in v.excerpt)
    assert not any("_flush_quiet" in x for x in v.excerpt)


GLOO_SIZE_ABORT = [
    "terminate called after throwing an instance of 'gloo::EnforceNotMet'",
    "  what():  [enforce fail at /__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:456] "
    "op.preamble.length <= op.nbytes. 1024 vs 1000. Received data size doesn't match expected size. "
    "Is there a distributed collective mismatch in your code?",
    "Fatal Python error: Aborted",
    "",
    "Thread 0x00007fe24d1376c0 (most recent call first):",
    '  File "/usr/lib/python3.11/threading.py", line 331 in wait',
    '  File "/work/main/runners/inject/ddptui_report.py", line 156 in _loop',
    "",
    "Thread 0x00007f57eec5ab80 (most recent call first):",
    '  File "/v/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", line 3252 in all_reduce',
    '  File "/v/lib/python3.11/site-packages/torch/distributed/c10d_logger.py", line 83 in wrapper',
    '  File "/work/allreduce_size_differs.py", line 12 in <module>',
    "",
]


def test_an_abort_from_a_cpp_exception_names_the_exception_not_aborted():
    """gloo's size check fails in its own thread: std::terminate, then faulthandler's 'Aborted' dump; the verdict
    quotes the exception (what gloo found) and keeps the user's frame."""
    v = decide([RankEvidence(1, -6, died_at=T0, err_lines=tuple(GLOO_SIZE_ABORT), step=4),
                RankEvidence(0, 1, died_at=T0 + 0.03, err_lines=("RuntimeError: ... Connection reset by peer. ...",))])
    assert v.root == 1 and v.victims == (0,)
    assert ("rank 1 failed first: SIGABRT (abort) at step 4: gloo::EnforceNotMet: op.preamble.length <= op.nbytes. "
            "1024 vs 1000. Received data size doesn't match expected size. Is there a distributed collective mismatch "
            "in your code? in <module> at allreduce_size_differs.py:12") in v.text, v.text
    # no "Current thread" (gloo's thread aborted): the thread with the user's frame, not ddptui's idle helper
    assert v.excerpt[:4] == tuple(GLOO_SIZE_ABORT[:3]) + (GLOO_SIZE_ABORT[8],), v.excerpt
    assert not any("_loop" in x for x in v.excerpt)
    # a plain abort (no C++ exception before it) still says what faulthandler said
    plain = decide([RankEvidence(1, -6, died_at=T0, err_lines=tuple(GLOO_SIZE_ABORT[2:]))])
    assert "SIGABRT (abort): Fatal Python error: Aborted in <module> at allreduce_size_differs.py:12" in plain.text


def test_os_exit_says_no_python_exception_and_quotes_the_last_output():
    # rank 1 chose exit 3 and its peer failed for it (the connection to it went): a crash, led by the chosen exit
    v = decide([RankEvidence(1, 3, died_at=T0, out_lines=("[rank 1] step 5", "[rank 1] saving", "")),
                RankEvidence(0, 1, died_at=T0 + 0.1, err_lines=(GLOO_CLOSED,))])
    assert v.what == "exit 3" and v.victims == (0,)
    assert "rank 1 failed first: exit 3 without a Python exception (last output: '[rank 1] saving')" in v.text


def test_an_exit_status_of_the_programs_own_is_no_crash_and_says_its_last_words():
    from ddptui.runners.evidence.own_exit import decide as own_exit
    # rank 1 exits 3 after its own check; the launcher stops rank 0 on its way out: nobody failed on their own
    ranks = [RankEvidence(1, 3, died_at=T0, step=20, out_lines=("[rank 1] replicas differ: [11, 12]", "")),
             RankEvidence(0, -15, died_at=T0 + 0.1, stopped_by="launcher", step=20)]
    assert decide(ranks) is None
    o = own_exit(ranks)
    assert o.text == ("rank 1 exited with status 3, the program's own (no exception, no signal: sys.exit or os._exit) "
                      "at step 20; rank 1's last words: '[rank 1] replicas differ: [11, 12]'; rank 0 stopped by the "
                      "launcher after rank 1 exited 3")
    assert o.outcomes == {1: ("failed", "exited 3: its own exit status, no exception"),
                          0: ("killed", "stopped by the launcher after rank 1 exited 3")}
    # the program's own verdict text is its last words; two statuses are said apart
    o = own_exit([RankEvidence(0, 3, died_at=T0, step=5), RankEvidence(1, 2, died_at=T0, step=5)],
                 {0: "replicas differ"})
    assert o.text.startswith("rank 0 exited with status 3") and "rank 0's last words: 'replicas differ'" in o.text
    assert "; rank 1 exited with status 2, the program's own" in o.text and o.codes == {0: 3, 1: 2}
    # not its own choice: an exception, a traceback or error line, a peer gone, a signal, a shell's 128+N
    exc = {"type": "ValueError", "msg": "x", "where": "t.py:1"}
    for e in (RankEvidence(0, 1, exc=exc), RankEvidence(0, 1, err_lines=("Traceback (most recent call last):",)),
              RankEvidence(0, 1, err_lines=("[rank0]: RuntimeError: boom",)), RankEvidence(0, 1, err_lines=(GLOO_CLOSED,)),
              RankEvidence(0, -9), RankEvidence(0, 137), RankEvidence(0, 1, stderr_seen=False)):
        assert own_exit([e]) is None and decide([e]) is not None, e
    assert own_exit([RankEvidence(0, 1, err_lines=("usage: train.py [-h]",))]) is not None  # argparse's exit
    # its last words are its own, not a warning read after them (the streams are read apart)
    said = ("replicas differ: [1.0, 2.5]", "/w/t.py:24: UserWarning: Converting a tensor with requires_grad=True",
            "Consider using tensor.detach() first. (Triggered internally at x.cpp:822.)", "  mine = float(p.sum())")
    assert "rank 0's last words: 'replicas differ: [1.0, 2.5]'" in own_exit([RankEvidence(0, 3, out_lines=said)]).text
    assert "last words: 'bye'" in own_exit([RankEvidence(0, 3, out_lines=said + ("bye",))]).text


def test_never_started_ranks_say_so():
    v = decide([RankEvidence(0, -15, died_at=T0 + 0.1, started=False, stopped_by="launcher"),
                RankEvidence(1, 1, died_at=T0, exc={"type": "ImportError", "msg": "no module x", "where": "t.py:1"}),
                RankEvidence(2, -15, died_at=T0 + 0.1, started=False)])
    assert v.root == 1 and v.never_started == (0, 2) and v.stopped == ()
    assert "ranks 0, 2 never started" in v.text and "killed" not in v.text
    assert v.outcomes[0] == ("killed", "never started")


def test_sigterm_without_a_sender_on_record_is_the_launchers_only_after_another_death():
    assert kind(RankEvidence(0, -15, died_at=T0 + 0.1), someone_died_before=True) == "stopped"
    assert kind(RankEvidence(0, -15, died_at=T0), someone_died_before=False) == "failed"
    v = decide([RankEvidence(0, -15, died_at=T0)])  # someone ran kill -TERM on the only rank that died
    assert v.root == 0 and v.what == "SIGTERM"


def test_torchruns_root_cause_breaks_ties_and_is_mentioned_when_it_disagrees():
    v = decide([RankEvidence(0, -6, died_at=T0), RankEvidence(1, -6, died_at=T0)], launcher_root=1)
    assert v.root == 1 and v.together == (0,)
    v = decide([RankEvidence(0, -15, died_at=T0 + 0.05, stopped_by="launcher"), RankEvidence(1, -9, died_at=T0)],
               launcher_root=0)
    assert v.root == 1 and "torchrun's Root Cause names rank 0" in v.text


def test_no_verdict_without_a_failure_of_a_rank_and_exit_time_aborts_after_work_are_not_crashes():
    assert decide([RankEvidence(0, 0), RankEvidence(1, 0)]) is None
    assert decide([RankEvidence(0, -6, completed=True), RankEvidence(1, 0)]) is None
    # a stopped run (every rank torn down by ddptui) is not a crash either
    assert decide([RankEvidence(0, -15, stopped_by="ddptui"), RankEvidence(1, -15, stopped_by="ddptui")]) is None


def test_a_death_after_ddptuis_own_stop_began_is_ddptuis_doing_whatever_the_signal():
    stop = T0 + 10
    assert ended_by_our_stop(RankEvidence(0, -15, died_at=stop + 0.2), stop)  # its TERM
    assert ended_by_our_stop(RankEvidence(0, -9, died_at=stop + 5.1), stop)  # its KILL at the deadline
    assert ended_by_our_stop(RankEvidence(0, 1, died_at=stop + 0.3), stop)  # the launcher passed it on; a handler
    # an error after the stop began is a consequence of it (a peer torn down first); one before it is the rank's own
    assert ended_by_our_stop(RankEvidence(0, 1, died_at=stop + 0.4, error_at=stop + 0.3), stop)
    assert not ended_by_our_stop(RankEvidence(0, 1, died_at=stop + 0.4, error_at=stop - 1), stop)
    assert not ended_by_our_stop(RankEvidence(0, -15, died_at=stop - 0.1), stop)  # someone else's TERM, before ours
    assert not ended_by_our_stop(RankEvidence(0, -15, died_at=stop + 1), None)  # ddptui never stopped the run
    assert not ended_by_our_stop(RankEvidence(0, -15), stop)  # no death time: not decided here


def test_words_for_a_rank_ddptui_stopped_say_why():
    assert stopped_words("stalled") == "stopped by ddptui after the stall"
    assert stopped_words("timeout") == "stopped by ddptui at the run's timeout"
    assert stopped_words("stopped") == "stopped by ddptui on request"
    assert stopped_words("failed", 1) == "torn down by ddptui after rank 1 failed"
    assert stopped_words(None) == "stopped by ddptui"


def test_thread_replicas_sharing_a_pid_torn_down_by_ddptui_are_stopped_not_failed_nor_never_started():
    # XLA on PJRT CPU: both replicas are threads of one worker; ddptui's TERM at teardown ends it, so both share one
    # death (same pid, same SIGTERM, same moment); each said hello itself, so each started
    stop = T0 + 20
    shared = dict(returncode=-15, died_at=stop + 0.3)
    reps = [RankEvidence(r, **shared, started=True, stopped_by="ddptui" if ended_by_our_stop(
        RankEvidence(r, **shared), stop) else None) for r in (0, 1)]
    assert [e.stopped_by for e in reps] == ["ddptui", "ddptui"]
    assert [kind(e, someone_died_before=False) for e in reps] == ["stopped", "stopped"]
    assert decide(reps) is None  # stopped, not crashed: no rank "failed: SIGTERM"
    # a replica that raised before the stop is still the root cause; its twin that ddptui stopped is not a failure
    exc = {"type": "RuntimeError", "msg": "boom", "where": "t.py:9"}
    v = decide([RankEvidence(0, -15, died_at=stop + 0.3, error_at=stop - 2, exc=exc),
                RankEvidence(1, -15, died_at=stop + 0.3, stopped_by="ddptui")])
    assert v.root == 0 and v.stopped == (1,) and v.never_started == () and v.victims == (), v.text
    assert v.outcomes[1] == ("killed", "torn down by ddptui after rank 0 failed")


def test_excerpt_prefers_the_traceback_then_the_report_then_the_last_lines():
    tb = ["noise", "Traceback (most recent call last):", '  File "a.py", line 1, in <module>', "KeyError: 'x'"]
    assert excerpt(RankEvidence(0, 1, err_lines=tuple(tb))) == tb[1:]
    assert excerpt(RankEvidence(0, 1, exc={"tb": ["T", "E: m"]})) == ["T", "E: m"]
    assert excerpt(RankEvidence(0, 3, out_lines=("a", "b"))) == ["a", "b"]


# ---- torchrun's own lines -----------------------------------------------------------------------------------

TORCHRUN_STDERR = textwrap.dedent("""\
    W1203 07:47:22.826000 6435 torch/distributed/elastic/multiprocessing/api.py:1028] Sending process 6488 closing signal SIGTERM
    E1203 07:47:22.863000 6435 torch/distributed/elastic/multiprocessing/api.py:1002] failed (exitcode: -9) local_rank: 1 (pid: 6489) of binary: /venv/bin/python3.11
    Traceback (most recent call last):
      File "/venv/bin/torchrun", line 6, in <module>
        sys.exit(main())
    torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
    ======================================================
    train.py FAILED
    ------------------------------------------------------
    Failures:
    [1]:
      time      : 2026-12-03_07:47:22
      host      : localhost
      rank      : 0 (local_rank: 0)
      exitcode  : -15 (pid: 6488)  (SIGTERM)
      error_file: <N/A>
      traceback : Signal 15 (SIGTERM) received by PID 6488
    ------------------------------------------------------
    Root Cause (first observed failure):
    [0]:
      time      : 2026-12-03_07:47:22
      host      : localhost
      rank      : 1 (local_rank: 1)
      exitcode  : -9 (pid: 6489)  (SIGKILL)
      error_file: <N/A>
      traceback : Signal 9 (SIGKILL) received by PID 6489
    ======================================================
    """).splitlines()

SIGNAL_TRACEBACK = textwrap.dedent("""\
    W1203 07:50:37.327000 8735 torch/distributed/elastic/agent/server/api.py:753] Received 15 death signal, shutting down workers
    Traceback (most recent call last):
      File "<frozen runpy>", line 198, in _run_module_as_main
      File "/venv/lib/python3.11/site-packages/torch/distributed/elastic/multiprocessing/api.py", line 86, in _terminate_process_handler
        raise SignalException(f"Process {os.getpid()} got signal: {sigval}", sigval=sigval)
    torch.distributed.elastic.multiprocessing.api.SignalException: Process 8735 got signal: 15
    """).splitlines()


def test_torchrun_lines_give_stopped_pids_exit_codes_and_its_root_cause():
    log = TorchrunLog()
    shown = [x for ln in TORCHRUN_STDERR for x in log.feed(ln, we_signalled=False)] + log.flush()
    assert shown == TORCHRUN_STDERR  # nothing hidden: a ChildFailedError is not ours to fold
    assert log.pid_stopped(6488)[0] == "SIGTERM" and log.pid_stopped(6489) is None
    assert log.first_failure == (1, 6489, -9) and log.root_rank == 1
    assert log.exit_codes({6488: 0, 6489: 1}, nproc=2) == [(0, -15), (1, -9)]
    assert log.failures[1].time is not None and log.failures[0].root is False


def test_signal_exception_traceback_folds_into_one_line_saying_who_stopped_the_launcher():
    log = TorchrunLog()
    shown = [x for ln in SIGNAL_TRACEBACK for x in log.feed(ln, we_signalled=True)] + log.flush()
    assert shown == [SIGNAL_TRACEBACK[0], "ddptui stopped the launcher (SIGTERM)"]
    log = TorchrunLog()
    shown = [x for ln in SIGNAL_TRACEBACK for x in log.feed(ln, we_signalled=False)]
    assert shown[-1] == "the launcher (pid 8735) was stopped by SIGTERM from outside ddptui"


def test_a_signal_that_interrupts_torchruns_shutdown_folds_into_the_same_line():
    """A second signal inside torchrun's shutdown chains a second SignalException traceback onto the first."""
    chained = SIGNAL_TRACEBACK + ["", "During handling of the above exception, another exception occurred:", ""] \
        + SIGNAL_TRACEBACK[1:] + ["W1203 07:50:38.000000 8735 torch/distributed/run.py:1] after"]
    log = TorchrunLog()
    shown = [x for ln in chained for x in log.feed(ln, we_signalled=True)] + log.flush()
    assert shown == [SIGNAL_TRACEBACK[0], "ddptui stopped the launcher (SIGTERM)", chained[-1]]


def test_other_launcher_tracebacks_pass_through_whole_even_when_split_across_reads():
    log = TorchrunLog()
    tb = ["Traceback (most recent call last):", '  File "x.py", line 1, in <module>', "ValueError: nope", "after"]
    assert log.feed(tb[0], True) == [] and log.feed(tb[1], True) == []
    assert log.feed(tb[2], True) == tb[:3] and log.feed(tb[3], True) == tb[3:]
    log = TorchrunLog()
    out = [x for ln in tb for x in log.feed(ln, True)] + log.flush()
    assert out == tb
    log = TorchrunLog()  # a traceback cut off when the launcher died is shown at the end
    assert [x for ln in tb[:2] for x in log.feed(ln, True)] == [] and log.flush() == tb[:2]


def test_error_file_report_reads_torch_record_format():
    rep = error_file_report({"message": {"message": "ValueError: bad shard 3", "extraInfo": {
        "py_callstack": 'Traceback (most recent call last):\n  File "/w/train.py", line 12, in main\nValueError: bad shard 3',
        "timestamp": "1700000000"}}})
    assert rep["type"] == "ValueError" and rep["msg"] == "bad shard 3" and rep["where"] == "/w/train.py:12"
    assert error_file_report({"nothing": 1}) is None


# ---- OOM evidence and the death watch -----------------------------------------------------------------------

def test_cgroup_paths_for_v1_and_v2_and_the_oom_kill_count():
    v1 = "4:memory:/process_api/abc\n0::/\n"
    assert cgroup_paths(v1)[0] == "/sys/fs/cgroup/memory/process_api/abc/memory.oom_control"
    assert cgroup_paths("0::/user.slice/x.scope\n") == ["/sys/fs/cgroup/user.slice/x.scope/memory.events",
                                                      "/sys/fs/cgroup/unified/user.slice/x.scope/memory.events"]
    assert parse_oom_kill("oom_kill_disable 0\nunder_oom 0\noom_kill 2\n") == 2
    assert parse_oom_kill("low 0\nhigh 0\nmax 4\noom 1\noom_kill 1\noom_group_kill 0\n") == 1
    assert parse_oom_kill("low 0\n") is None


def test_memory_limit_files_for_v1_and_v2_and_what_they_say():
    assert limit_files("4:memory:/process_api/abc\n0::/\n") == [
        "/sys/fs/cgroup/memory/process_api/abc/memory.stat"]
    assert limit_files("0::/user.slice/x.scope\n") == [  # the cgroup's own limit and each ancestor's
        "/sys/fs/cgroup/user.slice/x.scope/memory.max", "/sys/fs/cgroup/user.slice/memory.max",
        "/sys/fs/cgroup/unified/user.slice/x.scope/memory.max", "/sys/fs/cgroup/unified/user.slice/memory.max"]
    assert parse_limit("x/memory.stat", "cache 0\nhierarchical_memory_limit 1500000000\n") == 1_500_000_000
    assert parse_limit("x/memory.stat", "hierarchical_memory_limit 9223372036854771712\n") is None  # v1: none
    assert parse_limit("x/memory.max", "max\n") is None and parse_limit("x/memory.max", "8589934592\n") == 8 << 30
    here = memory_limit(os.getpid())  # this machine: its memory, or a cgroup limit below it
    assert here is not None and here.size > 0 and here.what in ("the machine's memory", "its memory cgroup's limit")


GB = 1_000_000_000
MACHINE = Limit(24 * GB, "the machine's memory")


@pytest.mark.parametrize("ev,own,together,level,words", [
    # what the machine says first: the kernel log names the pid, or the cgroup counted a kill (no log to read)
    (KillEvidence(log_names=True, counted=0), None, None, "oom", "out of memory: the kernel log says the OOM killer "
                                                                  "killed pid 42"),
    (KillEvidence(counted=2, limit=MACHINE), 20 * GB, None, "oom", "out of memory: its memory cgroup counted 2 OOM "
                                                                     "kills during the run"),
    # the log read whole names no kill of it, or the count stayed: not the OOM killer, whatever the RSS
    (KillEvidence(log_names=False, counted=0, limit=MACHINE), 310_000_000, 620_000_000, "not oom",
     "not the OOM killer: the kernel log names no OOM kill of pid 42; its memory cgroup counted no OOM kill during the "
     "run; its RSS peaked at 310 MB (the ranks here together 620 MB), 1% of the machine's memory, 24.0 GB"),
    (KillEvidence(log_names=False, counted=1, limit=MACHINE), 20 * GB, None, "not oom",  # another of the cgroup's
     "not the OOM killer: the kernel log names no OOM kill of pid 42; its RSS peaked at 20.0 GB, 83% of"),
    # nothing readable: the RSS samples against the limit
    (KillEvidence(limit=Limit(8 * GB, "its memory cgroup's limit")), 7_600_000_000, None, "near",
     "out of memory? its RSS peaked at 7.6 GB, 95% of its memory cgroup's limit, 8.0 GB"),
    (KillEvidence(limit=MACHINE), 5 * GB, 20 * GB, "near", "out of memory? its RSS peaked at 5.0 GB (the ranks here "
                                                             "together 20.0 GB), 21% of the machine's memory"),
    (KillEvidence(limit=MACHINE), 300_000_000, 600_000_000, "far", "not for memory by the look of it: its RSS peaked "
                                                                    "at 300 MB"),
    (KillEvidence(limit=MACHINE), 5 * GB, 10 * GB, "unknown", "sender unknown: its RSS peaked at 5.0 GB"),
    (KillEvidence(), None, None, "unknown", "sender unknown: no memory figure or OOM evidence read"),
])
def test_how_sure_a_sigkill_was_the_oom_killer(ev, own, together, level, words):
    r = read_kill(42, ev, own, together)
    assert r.level == level and r.words.startswith(words), r.words
    assert r.memory == (level in ("oom", "near"))


def test_kernel_log_names_the_killed_pids():
    recs = ["4,421,5109,-;oom-kill:constraint=CONSTRAINT_MEMCG,task=python3,pid=10019,uid=0\n",
            "3,422,5109,-;Memory cgroup out of memory: Killed process 10019 (python3) total-vm:323784kB\n",
            "6,1,1,-;Killed process group leader? no\n", "3,9,9,-;Out of memory: Killed process 77 (python)\n"]
    assert kernel_log_kills(recs) == {10019, 77}


def test_stat_exit_code_of_a_zombie():
    assert parse_stat_exit("42 (python3 (x)) Z " + " ".join(["0"] * 48) + " 9") == ("Z", -9)
    assert parse_stat_exit("42 (p) Z " + " ".join(["0"] * 48) + " 768") == ("Z", 3)
    assert parse_stat_exit("42 (p) S 1 2 3") == ("S", None)


@pytest.mark.timeout(30)
def test_death_watch_notes_when_a_process_it_did_not_spawn_died_and_how():
    # a child of another process (as ranks are torchrun's): sh starts sleep, we only learn its pid
    parent = subprocess.Popen(["sh", "-c", "sleep 30 & echo $!; wait"], stdout=subprocess.PIPE, text=True)
    try:
        pid = int(parent.stdout.readline())
        watch = DeathWatch()
        try:
            watch.watch(pid)
            killed_at = time.time()
            os.kill(pid, signal.SIGKILL)
            (d,) = wait_until(watch.deaths, 10, "the death noticed", step=0.01)
            assert d.pid == pid and d.exact and abs(d.wall - killed_at) < 1.0
            assert d.returncode in (-9, None)  # None only if sh reaped it before the thread read /proc
        finally:
            watch.close()
            watch.close()  # twice is harmless
    finally:
        parent.wait(timeout=10)
    idle = DeathWatch()  # never given a pid: no thread, nothing to close but itself
    idle.close()
    assert idle.deaths() == [] and not idle.watching(pid)


# ---- real runs --------------------------------------------------------------------------------------------

def _profile(tmp_path: Path, script: str, runner: str = "torchrun", env: dict | None = None,
             python: str | None = None) -> Path:
    """A profile running one of the plain fixture scripts on 2 ranks (torchrun: 2 local ranks; env: 2 nodes)."""
    lines = [f"name: {Path(script).stem}", f"runner: {runner}", "nproc: 2" if runner == "torchrun" else "nproc: 1\nnnodes: 2",
             "workload:", f"  script: {FIXTURES / script}"] + ([f"  python: {python}"] if python else []) + [
             "backend: gloo", "replica_check: false", "timeout: 100", "startup_grace: 90", "stall_after: 60"]
    if env:
        lines.append("env:")
        lines += [f"  {k}: '{v}'" for k, v in env.items()]
    path = tmp_path / "profile.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


def _states(rec) -> dict[int, tuple[str, str]]:
    out = {}
    for e in rec.of(ev.RankState):
        out[e.rank] = (e.status, e.detail)
    return out


def _assert_rank1_root_and_rank0_went_down_with_it(rec, session, words: str, exit_: str):
    crash = rec.one(ev.CrashVerdict)
    assert crash.root_rank == 1, crash.text
    assert crash.text.startswith(f"rank 1 failed first: {words}"), crash.text
    assert crash.exit == exit_
    assert 0 in crash.victims + crash.stopped, crash.text  # a victim, or stopped by the launcher: never the cause
    states = _states(rec)
    assert states[1][0] == "failed", states
    summary = json.loads((session.run_dir / "summary.json").read_text())
    assert summary["crash"]["root_rank"] == 1 and summary["ranks"]["1"]["status"] == "failed"


@pytest.mark.timeout(150)
@pytest.mark.parametrize("how,words,exit_", [
    ("sigkill", "killed by SIGKILL (", "SIGKILL"),  # then what the machine says of its memory: _assert_not_memory
    ("segfault", "SIGSEGV (segmentation fault) at step 5: Fatal Python error: Segmentation fault in die at "
                 "die_without_exception.py:", "SIGSEGV"),
    ("exit3", "exit 3 at step 5 without a Python exception", "exit 3"),
])
def test_torchrun_rank_dying_without_an_exception_is_the_root_cause(runs_dir, tmp_path, how, words, exit_):
    path = _profile(tmp_path, "die_without_exception.py", env={"DIE_HOW": how, "DIE_STEP": "5"})
    code, rec, session = run_profile(path, runs_dir)
    assert code == EXIT_FAILED
    if how == "exit3" and not rec.of(ev.CrashVerdict):  # torchrun stopped rank 0 before its peer-gone error: no crash
        own = rec.one(ev.RunFinished).summary["own_exit"]
        assert own["ranks"] == [1] and own["text"].startswith("rank 1 exited with status 3, the program's own"), own
        assert "at step 5; rank 1's last words: '[rank 1] dying (exit3) at step 5'" in own["text"]
        return
    _assert_rank1_root_and_rank0_went_down_with_it(rec, session, words, exit_)
    if how == "sigkill":
        _assert_not_memory(rec)


def _assert_not_memory(rec):
    """A rank that printed it dies and SIGKILLed itself, holding a few hundred MB: never told to use less memory."""
    crash = rec.one(ev.CrashVerdict)
    assert ", no Python exception (last output: '[rank 1] dying (sigkill) at step 5')" in crash.text, crash.text
    reading = crash.text.split("killed by SIGKILL (", 1)[1]
    assert reading.startswith(("not the OOM killer: ", "not for memory by the look of it: ", "sender unknown: ")), \
        crash.text
    assert "its RSS peaked at " in reading  # the samples before its death are the evidence shown
    hints = {h.code: h for h in rec.of(ev.HintRaised)}
    assert hints.keys() & {"sigkill-not-oom", "sigkill"} and not hints.keys() & {"oom-kill", "oom-kill-maybe"}
    assert not any("batch size" in h.fix for h in hints.values()), [h.fix for h in hints.values()]
    outcome = rec.one(ev.RunFinished).summary["crash"]["outcomes"][1]
    assert outcome.startswith("failed first (killed by SIGKILL (not ") or \
        outcome == "failed first (killed by SIGKILL (sender unknown))", outcome


@pytest.mark.timeout(150)
def test_env_runner_rank_killed_by_sigkill_is_the_root_cause(runs_dir, tmp_path):
    path = _profile(tmp_path, "die_without_exception.py", runner="env", env={"DIE_HOW": "sigkill", "DIE_STEP": "5"})
    code, rec, session = run_profile(path, runs_dir)
    assert code == EXIT_FAILED
    _assert_rank1_root_and_rank0_went_down_with_it(rec, session, "killed by SIGKILL (", "SIGKILL")
    _assert_not_memory(rec)


@pytest.mark.timeout(150)
def test_a_program_that_exits_3_after_its_own_replica_check_is_no_crash_anywhere(runs_dir, tmp_path):
    """Its own check fails and it exits 3 by design: every front end says the program's own exit status and its last
    words (the engine decides; the console, summary.json and the dashboard's banner and Verdict tab show it)."""
    import io

    from ddptui.tui.console import Console
    from ddptui.tui.model import RunModel
    from ddptui.tui.widgets.banner import banner_text
    from ddptui.tui.widgets.verdict_view import headline, replica_line, summary_rows

    path = _profile(tmp_path, "check_then_exit3.py")
    code, rec, session = run_profile(path, runs_dir, ["replica_check=true"])
    summary = json.loads((session.run_dir / "summary.json").read_text())
    assert not rec.of(ev.CrashVerdict) and summary["crash"] is None, summary["crash"]
    assert (code, summary["status"]) == (4, "replicas differ")  # ddptui's own replica check agrees with it
    own = summary["own_exit"]
    assert own["ranks"] and set(own["codes"].values()) == {3}, own  # the first to exit; torchrun may stop the other
    assert "exited with status 3, the program's own (no exception, no signal: sys.exit or os._exit) at step 10" \
        in own["text"] and "last words: 'replicas differ: checksums [" in own["text"], own["text"]
    for r, info in summary["ranks"].items():
        assert info["outcome"] in ("exited 3: its own exit status, no exception",
                                   "stopped by the launcher after rank 1 exited 3",
                                   "stopped by the launcher after rank 0 exited 3"), (r, info)
    assert "failed first" not in json.dumps(summary)
    out = io.StringIO()
    Console(out, color=False).handle(rec.events)
    shown = out.getvalue()
    assert f"exit: {own['text']}" in shown and "crash:" not in shown and "failed first" not in shown
    model = RunModel()
    model.apply(rec.events)
    assert banner_text(model)[1].endswith(f": {own['text']} · {replica_line(model.replica)}")
    assert f"exit: {own['text']}" in headline(model).plain
    assert {row[1].split(" ", 1)[1] for row in summary_rows(model)} <= {i["outcome"] for i in summary["ranks"].values()}


@pytest.mark.timeout(150)
def test_a_rank_the_launcher_stopped_is_said_to_be_stopped_not_failed_after_it(runs_dir, tmp_path):
    # rank 0 works alone (no collective), so it has no error of its own: torchrun's SIGTERM ends it
    path = _profile(tmp_path, "die_while_peer_works_alone.py")
    code, rec, session = run_profile(path, runs_dir)
    assert code == EXIT_FAILED
    crash = rec.one(ev.CrashVerdict)
    assert crash.root_rank == 1 and crash.stopped == (0,) and crash.victims == (), crash.text
    assert "rank 0 stopped by the launcher (SIGTERM) when rank 1 died" in crash.text
    assert "failed after" not in crash.text
    summary = json.loads((session.run_dir / "summary.json").read_text())["crash"]
    assert (summary["stopped"], summary["victims"], summary["together"], summary["never_started"]) == ([0], [], [], [])
    assert _states(rec)[0] == ("killed", "stopped by the launcher after rank 1 failed")
    # who stopped it, as the engine decided (the dashboard's crash panel reads these words)
    assert crash.outcomes[0] == "stopped by the launcher after rank 1 failed", crash.outcomes
    assert summary["outcomes"]["0"] == crash.outcomes[0] and summary["outcomes"]["1"].startswith("failed first")


def _torchrun_with_rank_wrapper(tmp_path: Path, wrapper_body: str, script: str):
    """An ad-hoc torchrun command (as `ddptui -- torchrun ...`) whose ranks start through a shell wrapper
    (`--no-python`): what a site script that prepares each rank's environment looks like."""
    from ddptui.runners.launch.profile.load import adhoc_profile
    wrapper = tmp_path / "rank_wrapper"
    wrapper.write_text(f"#!/bin/sh\n{wrapper_body}\nexec {sys.executable} -u \"$@\"\n")
    wrapper.chmod(0o755)
    return adhoc_profile([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                          "--no-python", str(wrapper), str(FIXTURES / script)], ["timeout=100", "replica_check=false"])


def _run(profile, runs_dir):
    from ddptui.runners.session import Session
    from tests.support.engine import Recorder
    rec = Recorder()
    session = Session(profile, runs_dir, emit=rec)
    return session.run(), rec, session


@pytest.mark.timeout(150)
def test_a_rank_that_never_started_says_so(runs_dir, tmp_path):
    # rank 0's interpreter is slow to come up (here: its wrapper waits); rank 1's program fails at once
    profile = _torchrun_with_rank_wrapper(tmp_path, '[ "$LOCAL_RANK" = 0 ] && exec sleep 90', "fail_at_start.py")
    code, rec, session = _run(profile, runs_dir)
    assert code == EXIT_FAILED
    crash = rec.one(ev.CrashVerdict)
    assert crash.root_rank == 1 and crash.never_started == (0,), crash.text
    assert "ValueError: no data shards found" in crash.text and "rank 0 never started" in crash.text
    summary = json.loads((session.run_dir / "summary.json").read_text())["crash"]
    assert summary["never_started"] == [0] and summary["stopped"] == [] and summary["root_rank"] == 1
    assert _states(rec)[0] == ("killed", "never started")


@pytest.mark.timeout(150)
def test_ddptui_stopping_torchrun_folds_its_signal_traceback_into_one_line(runs_dir, tmp_path):
    import threading

    path = _profile(tmp_path, "die_without_exception.py", env={"DIE_STEP": "100000000"})
    from ddptui.runners.launch.profile.load import load_profile
    from ddptui.runners.session import Session
    from tests.support.engine import Recorder

    rec = Recorder()
    session = Session(load_profile(path), runs_dir, emit=rec)

    missed: list[WaitTimeout] = []

    def stop_when_training():
        try:
            wait_until(lambda: any(e.rank == 1 and e.step for e in list(rec.of(ev.Progress))), 90,
                       "rank 1 training")
        except WaitTimeout as e:
            missed.append(e)
        session.request_stop()

    threading.Thread(target=stop_when_training, daemon=True).start()
    code = session.run()
    assert not missed, missed[0]
    assert code == EXIT_FAILED and session.status == "stopped"
    launcher = rec.lines(None)
    assert "ddptui stopped the launcher (SIGTERM)" in launcher
    assert not any("SignalException" in ln or ln.startswith("Traceback") for ln in launcher), launcher
    raw = (session.run_dir / "raw" / "torchrun.err").read_text()
    assert "SignalException" in raw  # the raw file keeps what torchrun wrote
    assert not rec.of(ev.CrashVerdict)


def _cgroup_for_test(limit: int) -> Path | None:
    try:
        own = Path("/proc/self/cgroup").read_text()
    except OSError:
        return None
    for line in own.splitlines():
        _, controllers, rel = line.split(":", 2)
        if "memory" in controllers.split(","):
            base = Path("/sys/fs/cgroup/memory") / rel.lstrip("/")
            try:
                cg = base / f"ddptui-test-{os.getpid()}-{time.monotonic_ns()}"
                cg.mkdir()
                (cg / "memory.limit_in_bytes").write_text(str(limit))
                return cg
            except OSError:
                return None
    return None


@pytest.mark.timeout(150)
def test_a_real_oom_kill_is_called_out_of_memory_with_its_evidence(runs_dir, tmp_path):
    cg = _cgroup_for_test(1_500_000_000)
    if cg is None:
        pytest.skip("needs a writable cgroup v1 memory controller (root) to cause a real OOM kill")
    try:
        # rank 1 runs in a memory cgroup limited to 1.5 GB (set -e: it never runs unlimited)
        profile = _torchrun_with_rank_wrapper(
            tmp_path, f'set -e\nif [ "$LOCAL_RANK" = 1 ]; then echo $$ > {cg}/cgroup.procs; fi',
            "grow_memory_at_step.py")
        code, rec, session = _run(profile, runs_dir)
        assert code == EXIT_FAILED
        crash = rec.one(ev.CrashVerdict)
        assert crash.root_rank == 1 and crash.exit == "SIGKILL", crash.text
        assert "killed by SIGKILL (out of memory: " in crash.text, crash.text
        assert "out of memory?" not in crash.text
        codes = {h.code: h for h in rec.of(ev.HintRaised)}  # (a line naming "oom_kill" may raise it first)
        assert codes["oom-kill"].fix.startswith("Lower the batch size")
        assert not codes.keys() & {"oom-kill-maybe", "sigkill-not-oom", "sigkill"}
    finally:
        for _ in range(50):
            try:
                cg.rmdir()
                break
            except OSError:
                time.sleep(0.1)


@pytest.mark.timeout(150)
@pytest.mark.parametrize("runner", ["torchrun", "env"])
def test_ranks_ddptui_stops_after_a_stall_are_stopped_by_it_not_failed(runs_dir, tmp_path, runner):
    # rank 1 sleeps at step 3, rank 0 waits in its all-reduce; on_stall: stop tears both down with ddptui's own
    # SIGTERM (torchrun: to the launcher and to each rank), which must not read as a failure of either rank
    path = _profile(tmp_path, "hang_ddp.py", runner=runner, env={"HANG_RANK": "1", "HANG_STEP": "3"})
    code, rec, session = run_profile(path, runs_dir, ["stall_after=3", "startup_grace=90", "on_stall=stop"])
    assert code == EXIT_STALLED
    summary = rec.one(ev.RunFinished).summary
    for r in (0, 1):
        info = summary["ranks"][r]
        assert (info["status"], info["outcome"]) == ("killed", "stopped by ddptui after the stall"), summary["ranks"]
        assert _states(rec)[r] == ("killed", "stopped by ddptui after the stall")
    assert not rec.of(ev.CrashVerdict)
