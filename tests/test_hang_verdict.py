"""Classification of stacks into where a rank is, and the hang sentence for each shape of hang."""
from __future__ import annotations

import time

import pytest

import json

from ddptui.runners.evidence import stack_types
from ddptui.runners.evidence.stack_types import Frame, StackResult, ThreadStack
from ddptui.runners.evidence.hang_verdict import Where, classify, collective_frame, hang_sentence, xla_thread_filter

pytestmark = pytest.mark.any_python

SP = "/venv/lib/python3.11/site-packages"
LIB = "/usr/lib/python3.11"
USER = "/work/train.py"


def th(frames, name="MainThread", idle=True):
    return [ThreadStack(name, 1, idle, [Frame(*f) for f in frames])]


def user(line=42, code="loss.backward()", func="main"):
    return (func, USER, line, code)


CASES = [
    ("c10d all_reduce", th([("all_reduce", f"{SP}/torch/distributed/distributed_c10d.py", 3252, "work.wait()"),
                            ("wrapper", f"{SP}/torch/distributed/c10d_logger.py", 83, "return func(*args, **kwargs)"),
                            user(30, "dist.all_reduce(t)")]),
     "collective", "all_reduce", 30),
    ("barrier", th([("barrier", f"{SP}/torch/distributed/distributed_c10d.py", 4800, "work.wait()"), user(9, "dist.barrier()")]),
     "collective", "barrier", 9),
    ("monitored_barrier", th([("monitored_barrier", f"{SP}/torch/distributed/distributed_c10d.py", 4900, ""), user(9, "")]),
     "collective", "monitored_barrier", 9),
    ("DDP init shape check", th([("_verify_params_across_processes", f"{SP}/torch/nn/parallel/distributed.py", 1064, ""),
                                 ("DistributedDataParallel.__init__", f"{SP}/torch/nn/parallel/distributed.py", 1064, ""),
                                 user(12, "model = DDP(model)")]),
     "collective", "parameter shape check across ranks (DDP init)", 12),
    ("DDP init broadcast", th([("_sync_params_and_buffers", f"{SP}/torch/distributed/utils.py", 326, ""),
                               ("_sync_module_states", f"{SP}/torch/distributed/utils.py", 315, ""),
                               user(12, "model = DDP(model)")]),
     "collective", "broadcast of the initial weights (DDP init)", 12),
    ("rendezvous", th([("init_process_group", f"{SP}/torch/distributed/distributed_c10d.py", 1600, ""), user(5, "")]),
     "collective", "rendezvous (init_process_group waits for the other ranks)", 5),
    ("DDP backward idle", th([("_engine_run_backward", f"{SP}/torch/autograd/graph.py", 979, ""),
                              ("backward", f"{SP}/torch/autograd/__init__.py", 395, ""),
                              ("Tensor.backward", f"{SP}/torch/_tensor.py", 623, ""), user()]),
     "collective", "all_reduce inside backward (DDP bucket all-reduce)", 42),
    ("backward unknown activity (faulthandler)", th([("_engine_run_backward", f"{SP}/torch/autograd/graph.py", 979, ""),
                                                     user()], idle=None),
     "collective", "all_reduce inside backward (DDP bucket all-reduce)", 42),
    ("backward computing", th([("_engine_run_backward", f"{SP}/torch/autograd/graph.py", 979, ""), user()], idle=False),
     "compute", "backward pass (computing)", 42),
    ("xla optimizer_step", th([("all_reduce", f"{SP}/torch_xla/core/xla_model.py", 500, ""),
                               ("optimizer_step", f"{SP}/torch_xla/core/xla_model.py", 900, ""),
                               user(20, "xm.optimizer_step(opt)", "_mp_fn")], name="xla-rank-0"),
     "xla", "xm.all_reduce", 20),
    ("xla sync", th([("sync", f"{SP}/torch_xla/torch_xla.py", 70, ""), user(21, "torch_xla.sync()", "_mp_fn")]),
     "xla", "graph execution (torch_xla.sync)", 21),
    ("xla turnstile", th([("Condition.wait", f"{LIB}/threading.py", 320, "waiter.acquire()"),
                          ("Condition.wait_for", f"{LIB}/threading.py", 360, ""),
                          ("Turnstile.before", "/work/main/runners/inject/ddptui_turnstile.py", 27, ""), user(22, "", "_mp_fn")]),
     "turn", "its turn after the lower ordinals (ddptui's ordinal turnstile, not a collective of the program)", 22),
    ("time.sleep", th([("culprit", USER, 88, "time.sleep(600)"), user(40, "culprit()")]), "sleep", "time.sleep", 88),
    ("dataloader worker wait", th([("Connection._recv", f"{LIB}/multiprocessing/connection.py", 395, ""),
                                   ("_MultiProcessingDataLoaderIter._try_get_data", f"{SP}/torch/utils/data/dataloader.py", 1100, ""),
                                   ("_BaseDataLoaderIter.__next__", f"{SP}/torch/utils/data/dataloader.py", 630, ""),
                                   user(50, "for x in loader:")]),
     "dataloader", "data loader (_try_get_data)", 50),
    ("socket recv", th([("socket.recv_into", f"{LIB}/socket.py", 706, ""), ("HTTPResponse.read", f"{LIB}/http/client.py", 460, ""),
                        user(7, "r = urlopen(u).read()")]),
     "io", "I/O (recv_into)", 7),
    ("file read in user code", th([user(7, "data = f.read()", "load")]), "io", "I/O (load)", 7),
    ("compute", th([("matmul_loop", USER, 61, "x = x @ w")], idle=False), "compute", "compute in matmul_loop", 61),
    ("idle elsewhere", th([("mystery", USER, 61, "lib.wait_native()")], idle=True), "unknown", "idle in mystery", 61),
]


@pytest.mark.parametrize("name,threads,category,detail,line", CASES, ids=[c[0] for c in CASES])
def test_classify(name, threads, category, detail, line):
    w = classify(threads)
    assert (w.category, w.detail, w.line) == (category, detail, line), w
    assert w.thread == threads[0].name


def test_classify_picks_main_thread_or_filtered_replica():
    main = ThreadStack("MainThread", 1, True, [Frame("Future.result", f"{LIB}/concurrent/futures/_base.py", 451, "")])
    gloo = ThreadStack("Thread-3", 2, True, [Frame("worker", f"{LIB}/threading.py", 320, "")])
    r0 = ThreadStack("xla-rank-0", 3, False, [Frame("step", USER, 10, "y = model(x)")])
    r1 = ThreadStack("xla-rank-1", 4, True, [Frame("all_reduce", f"{SP}/torch_xla/core/xla_model.py", 500, ""),
                                             Frame("_mp_fn", USER, 12, "xm.all_reduce(t)")])
    threads = [gloo, main, r0, r1]
    assert classify(threads).thread == "MainThread"
    assert (classify(threads, xla_thread_filter(1)).thread, classify(threads, xla_thread_filter(1)).category) == ("xla-rank-1", "xla")
    assert classify(threads, xla_thread_filter(0)).category == "compute"
    assert classify(threads, xla_thread_filter(7)).category == "unknown"
    assert classify([]).category == "unknown"


def test_where_to_dict_has_hang_verdict_fields():
    w = classify(th([("culprit", USER, 88, "time.sleep(600)")]))
    d = w.to_dict(step=12)
    assert {"category", "func", "file", "line", "code", "step"} <= set(d) and d["step"] == 12


SLEEP = Where("sleep", "time.sleep", "culprit", "/w/ddp_mlp.py", 88, "time.sleep(600)", "MainThread", "time.sleep")
BWD = Where("collective", "all_reduce inside backward (DDP bucket all-reduce)", "main", "/w/ddp_mlp.py", 70, "loss.backward()")
BAR = Where("collective", "barrier", "main", "/w/ddp_mlp.py", 99, "dist.barrier()")
SPIN = Where("compute", "compute in spin", "spin", "/w/other.py", 10, "x += 1")
T = time.mktime((2026, 1, 2, 14, 2, 11, 0, 0, -1))


def test_sentence_one_culprit():
    text, c, w = hang_sentence({0: BWD, 1: SLEEP, 2: BWD, 3: BWD}, {0: 12, 1: 12, 2: 12, 3: 12}, {0, 1, 2, 3}, T)
    assert text == ("rank 1 is stuck in culprit() at ddp_mlp.py:88 (calls time.sleep), step 12; ranks 0, 2, 3 wait in "
                    "all_reduce inside backward (DDP bucket all-reduce) at ddp_mlp.py:70 since 14:02:11")
    assert (c, w) == ((1,), (0, 2, 3))


def test_sentence_several_culprits():
    text, c, w = hang_sentence({0: BWD, 1: SLEEP, 2: SPIN}, {0: 5, 1: 5, 2: None}, [0, 1, 2], T)
    assert (c, w) == ((1, 2), (0,))
    assert text.startswith("ranks 1, 2 are outside any collective: rank 1 is stuck in culprit() at ddp_mlp.py:88 "
                           "(calls time.sleep), step 5; rank 2 is stuck in spin() at other.py:10 (computing), no step yet; "
                           "rank 0 waits in all_reduce inside backward (DDP bucket all-reduce) at ddp_mlp.py:70")
    assert text.endswith(" since 14:02:11")


def test_sentence_all_in_same_collective_is_a_lost_peer():
    text, c, w = hang_sentence({0: BWD, 1: BWD}, {0: 7, 1: 7}, {0, 1}, T)
    assert (c, w) == ((), (0, 1))
    assert "all ranks wait in all_reduce inside backward" in text and "lost peer" in text and "14:02:11" in text


def test_sentence_mismatched_collectives():
    text, c, w = hang_sentence({0: BWD, 1: BAR}, {0: 7, 1: 7}, {0, 1}, T)
    assert (c, w) == ((), (0, 1))
    assert "mismatched collectives" in text and "rank 1 in barrier at ddp_mlp.py:99" in text


def test_sentence_same_collective_different_steps_is_mismatch():
    text, _, _ = hang_sentence({0: BWD, 1: BWD}, {0: 7, 1: 6}, {0, 1}, T)
    assert "mismatched collectives" in text


def test_sentence_no_stacks():
    text, c, w = hang_sentence({}, {0: 3, 1: 3}, {0, 1}, T)
    assert (c, w) == ((), ())
    assert text.startswith("ranks 0, 1 stopped progressing since 14:02:11") and "no stacks available" in text


def test_sentence_missing_stack_of_one_rank_points_at_it():
    text, c, w = hang_sentence({0: BWD}, {0: 3, 1: 3}, {0, 1}, T)
    assert (c, w) == ((1,), (0,)) and "rank 1: no stacks, likely the culprit" in text


def test_sentence_slow_but_progressing():
    text, c, w = hang_sentence({0: BWD, 1: SPIN}, {0: 12, 1: 13}, {0}, T)
    assert (c, w) == ((1,), (0,))
    assert text.startswith("rank 1 is slow but still progressing (rank 1 step 13); rank 0 waits in all_reduce")


def test_sentence_nothing_stalled():
    text, c, w = hang_sentence({}, {0: 40, 1: 30}, set(), T)
    assert (c, w) == ((), ())
    assert text == "no rank is stalled; rank 1 is behind (30 vs 40 steps) but progressing"


TURN = Where("turn", "its turn after the lower ordinals (ddptui's ordinal turnstile, not a collective of the program)",
             "_mp_fn", "/w/xla_pattern1.py", 60, "xm.optimizer_step(opt)")


def test_a_replica_waiting_in_ddptuis_turnstile_is_no_collective_of_the_program():
    """The issue's verdict on a healthy XLA run under load: 'mismatched collectives (rank 0 in graph execution
    (torch_xla.sync) ...; rank 1 in ordinal-ordered sync ...)'. Rank 1 waits for rank 0's turn in ddptui's own
    turnstile: rank 0 is the one working (or stuck), in its turn, and no collective of the program is mismatched."""
    mp = ("_mp_fn", "/w/xla_pattern1.py", 60, "xm.optimizer_step(opt)")
    rank0 = th([("sync", f"{SP}/torch_xla/torch_xla.py", 70, ""), mp], name="xla-rank-0")
    rank1 = th([("Condition.wait", f"{LIB}/threading.py", 320, "waiter.acquire()"),
                ("Condition.wait_for", f"{LIB}/threading.py", 360, ""),
                ("Turnstile.before", "/work/main/runners/inject/ddptui_turnstile.py", 27, ""), mp], name="xla-rank-1")
    text, c, w = hang_sentence({0: classify(rank0), 1: classify(rank1)}, {0: 12, 1: 12}, {0, 1}, T)
    assert (c, w) == ((0,), (1,))
    assert text == ("rank 0 is in graph execution (torch_xla.sync) at xla_pattern1.py:60 (0: step 12) in its turn; "
                    "rank 1 waits for its turn after rank 0 in ddptui's ordinal turnstile, since 14:02:11")
    assert "mismatch" not in text and "lost peer" not in text


def test_the_turnstile_waits_for_a_culprit_in_user_code_and_alone_points_at_the_rank_without_stacks():
    text, c, w = hang_sentence({0: SLEEP, 1: TURN, 2: TURN}, {0: 3, 1: 3, 2: 3}, {0, 1, 2}, T)
    assert (c, w) == ((0,), (1, 2))
    assert text == ("rank 0 is stuck in culprit() at ddp_mlp.py:88 (calls time.sleep), step 3; ranks 1, 2 wait for "
                    "their turns after the lower ranks in ddptui's ordinal turnstile since 14:02:11")
    text, c, w = hang_sentence({1: TURN}, {0: 3, 1: 3}, {0, 1}, T)
    assert (c, w) == ((0,), (1,))
    assert text == ("rank 1 waits for its turn after rank 0 in ddptui's ordinal turnstile since 14:02:11; rank 0: "
                    "no stacks, likely the culprit")


# ---- the culprit named in the user's own code, ddptui's helper thread, DataLoader workers ----

HANG_PY = "/w/hang.py"
HELPER = ThreadStack("ddptui-report", 9, True, [
    Frame("Event.wait", f"{LIB}/threading.py", 629, "signaled = self._cond.wait(timeout)"),
    Frame("_flush_quiet", "/opt/ddptui/runners/inject/ddptui_report.py", 141, "while main.is_alive()"),
    Frame("Thread.run", f"{LIB}/threading.py", 982, "self._target(*self._args, **self._kwargs)")])


def lock_frames(qualified=True):
    """rank 1 in the user's wait_for_lock(), which waits on a threading.Event nobody sets."""
    q = (lambda n: n) if qualified else (lambda n: n.rsplit(".", 1)[-1])  # faulthandler has plain names
    return [Frame(q("Condition.wait"), f"{LIB}/threading.py", 327, "waiter.acquire()"),
            Frame(q("Event.wait"), f"{LIB}/threading.py", 629, "signaled = self._cond.wait(timeout)"),
            Frame("wait_for_lock", HANG_PY, 9, "threading.Event().wait()"),
            Frame("train", HANG_PY, 21, "wait_for_lock()"),
            Frame("<module>", HANG_PY, 30, "train()")]


def test_culprit_is_the_innermost_user_frame_and_what_it_calls():
    w1 = classify([HELPER, ThreadStack("MainThread", 1, True, lock_frames())])
    assert (w1.func, w1.file, w1.line, w1.calls, w1.thread) == ("wait_for_lock", HANG_PY, 9, "threading.Event.wait", "MainThread")
    w0 = classify(th([("all_reduce", f"{SP}/torch/distributed/distributed_c10d.py", 3252, "work.wait()"),
                      ("wrapper", f"{SP}/torch/distributed/c10d_logger.py", 83, ""),
                      ("train", HANG_PY, 18, "dist.all_reduce(t)")]))
    text, c, w = hang_sentence({0: w0, 1: w1}, {0: 10, 1: 10}, {0, 1}, T)
    assert text == ("rank 1 is stuck in wait_for_lock() at hang.py:9 (calls threading.Event.wait), step 10; "
                    "rank 0 waits in all_reduce at hang.py:18 since 14:02:11")
    assert (c, w) == ((1,), (0,))
    assert w1.to_dict(10)["calls"] == "threading.Event.wait" and w1.to_dict(10)["step"] == 10


def test_faulthandler_names_still_give_the_user_function():
    w = classify([ThreadStack("MainThread", 1, None, lock_frames(qualified=False))])
    assert (w.func, w.line, w.calls) == ("wait_for_lock", 9, "threading.wait")


def test_library_call_names_read_as_users_import_them():
    assert stack_types.qualified(Frame("Tensor.backward", f"{SP}/torch/_tensor.py", 1, "")) == "torch.Tensor.backward"
    assert stack_types.qualified(Frame("all_reduce", f"{SP}/torch/distributed/distributed_c10d.py", 1, "")) == "torch.distributed.all_reduce"
    assert stack_types.qualified(Frame("Queue.get", f"{LIB}/multiprocessing/queues.py", 1, "")) == "multiprocessing.queues.Queue.get"
    w = classify(th([("step", "/w/t.py", 3, "time.sleep(5)")]))  # a C function: named from the call in the code
    assert (w.func, w.calls) == ("step", "time.sleep")


def test_culprit_without_any_user_frame_says_what_the_library_does():
    w = classify(th([("Condition.wait", f"{LIB}/threading.py", 327, "waiter.acquire()"),
                     ("Thread.join", f"{LIB}/threading.py", 1100, "")]))
    text, _, _ = hang_sentence({0: w}, {0: 2}, {0}, T)
    assert text.startswith("rank 0 is stuck in waits on threading (wait) at threading.py:327, step 2"), text


def test_helper_thread_never_speaks_for_the_rank_and_goes_last():
    # faulthandler names no thread: the helper is known by its loop's frame, and the main thread by having no _bootstrap
    helper = ThreadStack("Thread 0x7f01", 0x7F01, None, HELPER.frames)
    main = ThreadStack("MainThread", 0x7F00, None, lock_frames())
    other = ThreadStack("Thread 0x7f02", 0x7F02, None, [Frame("loop", "/w/x.py", 1, "")])
    assert stack_types.is_helper(helper) and not stack_types.is_helper(main)
    assert [t.name for t in stack_types.ordered([helper, other, main])] == ["MainThread", "Thread 0x7f02", "Thread 0x7f01"]
    assert classify([helper, other]).thread == "Thread 0x7f02"  # no MainThread: the first thread that is not ours
    assert classify([helper]).category == "unknown"
    text = stack_types.render(StackResult(0, 1, "faulthandler", [helper, main]))
    assert text.index("MainThread") < text.index("ddptui's own helper thread")
    assert [t["thread"] for t in stack_types.to_json(StackResult(0, 1, "py-spy", [HELPER, main]))] == ["MainThread", "ddptui-report"]


def test_folded_stack_puts_the_user_frame_first():
    frames = lock_frames() + [Frame("Module._call_impl", f"{SP}/torch/nn/modules/module.py", 1, ""),
                              Frame("Module.__call__", f"{SP}/torch/nn/modules/module.py", 2, ""),
                              Frame("main", HANG_PY, 40, "model(x)")]
    kinds = [k for k, _ in stack_types.fold(frames)]
    assert kinds == ["user", "calls", "user", "user", "lib", "user"]
    lines = stack_types.folded_lines(frames, indent="")
    assert lines[0] == "wait_for_lock() at hang.py:9    threading.Event().wait()"
    assert lines[1] == "    ... calls threading.Event.wait: 2 frames in threading.py"
    assert lines[4] == "    ... 2 frames in torch/nn/modules/module.py" and lines[5].startswith("main() at hang.py:40")


DL = f"{SP}/torch/utils/data"
RANK_IN_LOADER = th([("_PollLikeSelector.select", f"{LIB}/selectors.py", 415, ""),
                     ("Queue.get", f"{LIB}/multiprocessing/queues.py", 113, ""),
                     ("_MultiProcessingDataLoaderIter._try_get_data", f"{DL}/dataloader.py", 1291, ""),
                     ("_BaseDataLoaderIter.__next__", f"{DL}/dataloader.py", 725, ""),
                     ("train", "/w/data.py", 30, "for x in loader:")])


def worker(pid, wid, inner):
    frames = [Frame(*f) for f in inner] + [Frame("_worker_loop", f"{DL}/_utils/worker.py", 334, ""),
                                           Frame("BaseProcess.run", f"{LIB}/multiprocessing/process.py", 108, "")]
    return StackResult(0, pid, "py-spy", [ThreadStack("MainThread", pid, True, frames)], worker_id=wid)


IDLE_WORKER = [("Queue.get", f"{LIB}/multiprocessing/queues.py", 113, "")]
STUCK_WORKER = [("slow_load", "/w/data.py", 12, "time.sleep(600)"), ("D.__getitem__", "/w/data.py", 20, "return slow_load(i)"),
                ("_MapDatasetFetcher.fetch", f"{DL}/_utils/fetch.py", 54, "")]


def test_dataloader_hang_names_the_worker_and_where_it_is():
    w = classify(RANK_IN_LOADER, workers=[worker(4320, 0, IDLE_WORKER), worker(4321, 1, STUCK_WORKER)])
    assert w.category == "dataloader" and w.worker["pid"] == 4321 and w.worker["worker_id"] == 1
    text, c, _ = hang_sentence({0: w, 1: BWD}, {0: 3, 1: 3}, {0, 1}, T)
    assert text.startswith("rank 0 waits for its DataLoader worker 1 (pid 4321), which is in slow_load() at data.py:12 "
                           "(calls time.sleep), step 3; rank 1 waits in all_reduce inside backward"), text
    assert c == (0,)
    assert json.loads(json.dumps(w.to_dict(3)))["worker"]["label"] == "DataLoader worker 1 (pid 4321)"


def test_dataloader_without_a_busy_worker_names_none():
    w = classify(RANK_IN_LOADER, workers=[worker(4320, 0, IDLE_WORKER)])
    text, _, _ = hang_sentence({0: w}, {0: 3}, {0}, T)
    assert "DataLoader" in text and "train() at data.py:30" in text and "not in user code" in text
    assert "worker 0" in text and "which is in" not in text


def test_worker_id_read_from_pyspy_locals():
    dump = [{"thread_name": "MainThread", "frames": [
        {"name": "_worker_loop", "filename": f"{DL}/_utils/worker.py", "line": 374,
         "locals": [{"name": "dataset_kind", "repr": "0"}, {"name": "worker_id", "repr": "3"}]}]}]
    assert stack_types.worker_id(json.dumps(dump)) == 3
    assert stack_types.worker_id("[]") is None and stack_types.worker_id("not json") is None


@pytest.mark.parametrize("func,file,expected", [
    ("all_reduce", f"{SP}/torch/distributed/distributed_c10d.py", ("collective", "all_reduce")),
    ("barrier", f"{SP}/torch/distributed/distributed_c10d.py", ("collective", "barrier")),
    ("optimizer_step", f"{SP}/torch_xla/core/xla_model.py", ("xla", "gradient all-reduce in xm.optimizer_step")),
    ("all_reduce", "/w/train.py", None),  # the user's own function of that name is not the collective
    ("forward", f"{SP}/torch/nn/modules/linear.py", None),
    ("culprit_wait", "/w/hang_ddp.py", None),
])
def test_collective_frame(func, file, expected):
    assert collective_frame(func, file) == expected


@pytest.mark.parametrize("func,file", [
    ("_verify_param_shape_across_processes", f"{SP}/torch/distributed/utils.py"),
    ("_sync_module_states", f"{SP}/torch/distributed/utils.py"),
    ("_sync_params_and_buffers", f"{SP}/torch/distributed/utils.py"),
    ("DistributedDataParallel._distributed_broadcast_coalesced", f"{SP}/torch/nn/parallel/distributed.py"),
    ("DistributedDataParallel._sync_buffers", f"{SP}/torch/nn/parallel/distributed.py"),
    ("_check_global_requires_backward_grad_sync", f"{SP}/torch/nn/parallel/distributed.py"),
])
def test_every_ddp_sync_the_hang_verdict_names_is_ddps_own_collective_for_the_xla_evidence(func, file):
    """One home for "is this frame DDP's own collective": the frame classifier's table, which the XLA evidence asks."""
    from ddptui.runners.evidence import xla_evidence
    from ddptui.runners.evidence.hang_verdict import in_ddp

    assert collective_frame(func, file)[0] == "collective" and in_ddp(func, file)
    assert xla_evidence.ddp_collective(None, {0: (func.rsplit(".", 1)[-1], file)})
    assert not in_ddp(func, "/w/train.py") and collective_frame(func, "/w/train.py") is None


def test_dataloader_with_an_unreadable_worker_says_so():
    unreadable = StackResult(0, 4322, "unavailable: py-spy timed out after 5s")
    w = classify(RANK_IN_LOADER, workers=[worker(4320, 0, IDLE_WORKER), unreadable])
    text, _, _ = hang_sentence({0: w}, {0: 3}, {0}, T)
    assert "could not be read" in text and "pid 4322" in text and "not in user code" not in text


def test_dataset_code_in_the_rank_itself_is_the_culprit_not_a_worker_wait():
    # num_workers=0: the rank runs __getitem__ itself; the DataLoader frames are only on the way there
    w = classify(th([("slow_load", "/w/data.py", 12, "time.sleep(600)"),
                     ("Samples.__getitem__", "/w/data.py", 20, "return slow_load(i)"),
                     ("_MapDatasetFetcher.fetch", f"{DL}/_utils/fetch.py", 54, ""),
                     ("_BaseDataLoaderIter.__next__", f"{DL}/dataloader.py", 725, ""),
                     ("train", "/w/data.py", 30, "for x in loader:")]))
    assert (w.category, w.func, w.calls) == ("sleep", "slow_load", "time.sleep")


# ---- a stack sample of a run that slowed down but still moves: phrased as a slow-down ----
from ddptui.runners.evidence.hang_verdict import slow_sentence  # noqa: E402

AT_STEP = Where("sleep", "time.sleep", "at_step", "/r/_faults.py", 67, "time.sleep(s)", "MainThread", "time.sleep")
AR = Where("collective", "all_reduce", "main", "/w/ddp_mlp.py", 70, "dist.all_reduce(t)")
SLOWED = {0: "rank 0's steps take 0.50 s, 160x its first 20 steps' 3.1 ms",
          1: "rank 1's steps take 0.51 s, 170x its first 20 steps' 3.0 ms"}


def test_slow_sample_names_the_rank_outside_the_collective_with_its_own_numbers():
    text, c, w = slow_sentence({0: AR, 1: AT_STEP}, SLOWED)
    assert text == ("the run slowed down (rank 1's steps take 0.51 s, 170x its first 20 steps' 3.0 ms): rank 1 is in "
                    "at_step() at _faults.py:67 (calls time.sleep); rank 0 waits for it in all_reduce")
    assert (c, w) == ((1,), (0,))


def test_slow_sample_with_every_rank_in_a_collective_is_no_hang():
    # lock-step ranks caught in the same or in different collectives at one moment: neither a lost peer nor a mismatch
    for wheres in ({0: AR, 1: AR}, {0: AR, 1: BAR}, {0: BWD, 1: AR}):
        text, c, w = slow_sentence(wheres, SLOWED)
        assert (c, w) == ((), (0, 1))
        assert text.startswith("the run slowed down (rank 0's steps take 0.50 s, 160x its first 20 steps' 3.1 ms; "
                               "rank 1's steps take 0.51 s"), text
        assert text.endswith("so it does not single out the slow rank")
        for wrong in ("stuck", "lost peer", "mismatched", "since"):
            assert wrong not in text, (wrong, text)


def test_slow_sample_several_outside_and_a_rank_without_stacks():
    text, c, w = slow_sentence({0: AR, 1: AT_STEP, 2: SPIN}, {1: SLOWED[1]})
    assert (c, w) == ((1, 2), (0,))
    assert text == ("the run slowed down (rank 1's steps take 0.51 s, 170x its first 20 steps' 3.0 ms): rank 1 is in "
                    "at_step() at _faults.py:67 (calls time.sleep); rank 2 is in spin() at other.py:10 (computing); "
                    "rank 0 waits for them in all_reduce")
    text, c, w = slow_sentence({0: AR}, SLOWED)
    assert c == () and text.endswith("(rank 1: no stacks)") and "stuck" not in text
    text, _, _ = slow_sentence({}, SLOWED)
    assert text.endswith(": no stacks could be read")
