"""Classification of stacks into where a rank is, and the hang sentence for each shape of hang."""
from __future__ import annotations

import time

import pytest

from runners.stacks import Frame, ThreadStack
from runners.verdict import Where, classify, hang_sentence, xla_thread_filter

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
                          ("_Turnstile.before", "/work/main/runners/inject/ddptui_xla.py", 163, ""), user(22, "", "_mp_fn")]),
     "xla", "ordinal-ordered sync (waits for its turn after the lower ordinals)", 22),
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


SLEEP = Where("sleep", "time.sleep", "culprit", "/w/ddp_mlp.py", 88, "time.sleep(600)")
BWD = Where("collective", "all_reduce inside backward (DDP bucket all-reduce)", "main", "/w/ddp_mlp.py", 70, "loss.backward()")
BAR = Where("collective", "barrier", "main", "/w/ddp_mlp.py", 99, "dist.barrier()")
SPIN = Where("compute", "compute in spin", "spin", "/w/other.py", 10, "x += 1")
T = time.mktime((2026, 1, 2, 14, 2, 11, 0, 0, -1))


def test_sentence_one_culprit():
    text, c, w = hang_sentence({0: BWD, 1: SLEEP, 2: BWD, 3: BWD}, {0: 12, 1: 12, 2: 12, 3: 12}, {0, 1, 2, 3}, T)
    assert text == ("rank 1 is stuck in time.sleep at ddp_mlp.py:88 (step 12); ranks 0, 2, 3 wait in all_reduce inside "
                    "backward (DDP bucket all-reduce) for it since 14:02:11")
    assert (c, w) == ((1,), (0, 2, 3))


def test_sentence_several_culprits():
    text, c, w = hang_sentence({0: BWD, 1: SLEEP, 2: SPIN}, {0: 5, 1: 5, 2: None}, [0, 1, 2], T)
    assert (c, w) == ((1, 2), (0,))
    assert text.startswith("ranks 1, 2 are outside any collective: rank 1 in time.sleep at ddp_mlp.py:88 (step 5); "
                           "rank 2 in compute in spin at other.py:10 (no step yet); rank 0 waits in")
    assert text.endswith("for them since 14:02:11")


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
