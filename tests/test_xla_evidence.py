"""XLA's rendezvous log lines as evidence (runners/evidence/xla_evidence.py), on lines recorded from real PJRT CPU runs; no torch_xla needed."""
from __future__ import annotations

import time

import pytest

from ddptui.runners.evidence import xla_evidence as xe
from ddptui.runners.evidence.hints import HintMatcher, by_code
from ddptui.runners.evidence.stack_types import Frame
from ddptui.runners.evidence.hang_verdict import Where

pytestmark = pytest.mark.any_python

# Recorded from the reference's pattern 2 (DDP over xla://, gradient_as_bucket_view=True) on 2 PJRT CPU replicas.
KEY0 = ("RendezvousKey{run_id=RunId: 0, global_devices=[0,1], num_local_participants=2, "
        "collective_op_kind=cross_replica, op_id=0}")
KEY1 = KEY0.replace("op_id=0", "op_id=1")
WAIT = ("{stamp}: E external/xla/xla/service/rendezvous.cc:100] [id=0] This thread has been waiting for `all gather "
        "{key}` for 5 seconds and may be stuck. Expected 2 threads to join the rendezvous, but not all of them arrived "
        "on time.")
TERM = ("{stamp}: F external/xla/xla/service/rendezvous.cc:127] [id=0] Termination timeout for `all gather {key}` of "
        "10 seconds exceeded. Exiting to ensure a consistent program state. Expected 2 threads to join the rendezvous, "
        "but only 1 of them arrived on time.")
# The abort's faulthandler dump, as the worker wrote it (two threads' headers torn into one line).
DUMP = [
    "Fatal Python error: AbortedFatal Python error: ",
    "Aborted",
    "",
    "Thread 0x00007f28f9ffb6c0 (most recent call first):",
    '  File "/v/lib/python3.11/site-packages/torch/distributed/utils.py", line 281 in _verify_param_shape_across_processes',
    '  File "/v/lib/python3.11/site-packages/torch/nn/parallel/distributed.py", line 858 in __init__',
    '  File "/work/main/tests/fixtures/xla_reference_pattern2.py", line 25 in _mp_fn',
    "",
    "Thread 0x00007f2a3140fb80 (most recent call first):",
    '  File "/usr/lib/python3.11/threading.py", line 327 in wait',
]


def _stamp(wall: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(wall)) + ".190496"


def _feed(rdv, lines, wall):
    return [rdv.feed(ln, wall) for ln in lines]


def test_parse_waiting_and_termination_lines():
    now = time.time()
    w = xe.parse_line(WAIT.format(stamp=_stamp(now), key=KEY0))
    assert w.kind == "waiting" and w.op == "all gather" and w.key == KEY0 and w.seconds == 5 and w.expected == 2
    assert w.arrived is None and w.op_id == "0" and abs(w.stamp - now) < 1.5
    t = xe.parse_line(TERM.format(stamp=_stamp(now), key=KEY1))
    assert t.kind == "terminated" and t.op == "all gather" and t.op_id == "1" and t.seconds == 10
    assert t.expected == 2 and t.arrived == 1
    # glog's older prefix, and the field notes' shorter form
    g = xe.parse_line("E1203 07:49:21.190496   1234 rendezvous.cc:100] This thread has been waiting for "
                      "`all reduce RendezvousKey{run_id=RunId: 3, op_id=7}` for 10 seconds and may be stuck.")
    assert g.op == "all reduce" and g.op_id == "7" and g.seconds == 10 and g.stamp is None
    for line in ("rendezvous is done", "Step 0, Loss: 1.03", "[rank 0] step 3 loss 0.5", ""):
        assert xe.parse_line(line) is None


def test_two_keys_of_one_op_is_a_split_rendezvous_and_the_abort_is_named():
    rdv = xe.Rendezvous()
    t0 = time.time()
    assert not rdv.stalled
    _feed(rdv, [WAIT.format(stamp=_stamp(t0), key=KEY0), WAIT.format(stamp=_stamp(t0), key=KEY1)], t0 + 0.1)
    assert rdv.stalled and rdv.split_keys() and rdv.ops() == ["all gather"]
    assert abs(rdv.since - (t0 - 5)) < 1.5
    assert rdv.describe() == "all gather (2 rendezvous keys: op_id 0, 1)"
    assert not rdv.terminated
    _feed(rdv, [TERM.format(stamp=_stamp(t0 + 10), key=KEY0), TERM.format(stamp=_stamp(t0 + 10), key=KEY1)] + DUMP,
          t0 + 10.1)
    assert len(rdv.terminated) == 2 and rdv.timeout() == 10 and rdv.aborted is not None
    assert rdv.describe() == "all gather (2 rendezvous keys: op_id 0, 1; 1 of 2 replicas arrived in each)"
    assert rdv.ddp_frame == "_verify_param_shape_across_processes"
    text = xe.abort_sentence(rdv)
    assert text.startswith("XLA aborted after its rendezvous termination timeout in all gather")
    assert "(10 s)" in text and "SIGABRT" in text
    assert any("Termination timeout" in ln for ln in rdv.lines) and any("Fatal Python error" in ln for ln in rdv.lines)


def test_a_step_after_the_warning_settles_it_and_a_new_wait_starts_afresh():
    rdv = xe.Rendezvous()
    t0 = time.time()
    rdv.feed(WAIT.format(stamp=_stamp(t0), key=KEY0), t0)
    rdv.steps_now({0: 1, 1: 1})
    rdv.steps_now({0: 1, 1: 1})
    assert rdv.stalled  # nobody moved
    rdv.steps_now({0: 2, 1: 2})
    assert not rdv.stalled  # a slow first compilation, not a stall
    rdv.feed(WAIT.format(stamp=_stamp(t0 + 30), key=KEY1), t0 + 30)
    assert rdv.stalled and list(rdv.keys) == [KEY1] and not rdv.split_keys()


def test_a_clock_far_from_ours_is_not_trusted():
    rdv = xe.Rendezvous()
    now = time.time()
    rdv.feed(WAIT.format(stamp=_stamp(now - 7200), key=KEY0), now)  # e.g. another time zone in the worker
    assert abs(rdv.since - (now - 5)) < 1e-6


def _split_rdv():
    rdv = xe.Rendezvous()
    now = time.time()
    _feed(rdv, [WAIT.format(stamp=_stamp(now), key=KEY0), WAIT.format(stamp=_stamp(now), key=KEY1)], now)
    return rdv


def test_stall_sentence_when_every_replica_is_in_the_collective_on_its_own_key():
    rdv = _split_rdv()
    w = Where("collective", "parameter shape check across ranks (DDP init)", "_mp_fn", "/x/xla_reference_pattern2.py", 25)
    frames = [Frame("_verify_param_shape_across_processes", "/v/site-packages/torch/distributed/utils.py", 281),
              Frame("DistributedDataParallel.__init__", "/v/site-packages/torch/nn/parallel/distributed.py", 858),
              Frame("_mp_fn", "/x/xla_reference_pattern2.py", 25)]
    calls = {0: xe.library_call(frames), 1: xe.library_call(frames)}
    assert calls[0] == ("_verify_param_shape_across_processes", "/v/site-packages/torch/distributed/utils.py")
    base = "all ranks wait in parameter shape check ... a lost peer (a rank that died or never joined)"
    text, culprits, waiting = xe.stall_sentence(rdv, base, (), (0, 1), {0: w, 1: w}, calls, {0: None, 1: None})
    assert text.startswith("XLA collective stall in all gather (2 rendezvous keys: op_id 0, 1)")
    assert "each waits on its own rendezvous key" in text and "lost peer" not in text
    for r in (0, 1):
        assert (f"rank {r} in parameter shape check across ranks (DDP init) (_verify_param_shape_across_processes) "
                f"at xla_reference_pattern2.py:25 (no step yet)") in text
    assert "aborts the worker" in text
    assert culprits == () and waiting == (0, 1)
    assert xe.ddp_collective(rdv, calls)


def test_stall_sentence_keeps_the_culprit_the_stacks_name():
    rdv = xe.Rendezvous()
    now = time.time()
    rdv.feed(WAIT.format(stamp=_stamp(now), key=KEY0).replace("all gather", "all reduce"), now)
    sleeper = Where("sleep", "time.sleep", "at_step", "/w/_faults.py", 66)
    waiter = Where("xla", "graph execution (torch_xla.sync)", "_mp_fn", "/w/xla_pattern1.py", 40)
    base = "rank 1 is stuck in time.sleep at _faults.py:66 (step 3); rank 0 waits in graph execution for it"
    text, culprits, waiting = xe.stall_sentence(rdv, base, (1,), (0,), {0: waiter, 1: sleeper}, {}, {0: 3, 1: 3})
    assert text.startswith(base) and "XLA collective stall in all reduce (op_id 0)" in text
    assert culprits == (1,) and waiting == (0,)
    assert not xe.ddp_collective(rdv, {0: ("sync", "/v/torch_xla/torch_xla.py")})
    # a replica waiting in DDP's bucket rebuild for a culprit that sleeps: the culprit is the cause, not DDP
    ddp_wait = {0: ("_pre_forward", "/v/torch/nn/parallel/distributed.py")}
    assert xe.ddp_collective(rdv, ddp_wait) and not xe.ddp_collective(rdv, ddp_wait, (1,))
    assert not xe.ddp_collective(rdv, {**ddp_wait, 1: ("sleep", "/v/torch/_dynamo/x.py")})


def test_stall_sentence_without_stacks():
    rdv = _split_rdv()
    base = "ranks 0, 1 made no progress since 08:00:00 (...); press d / send SIGUSR1 for stacks"
    text, culprits, waiting = xe.stall_sentence(rdv, base, (), (0, 1), {}, {}, {})
    assert text.startswith(base + "; XLA collective stall in all gather") and waiting == (0, 1)


def test_ddp_collectives_are_told_from_others():
    ddp = {0: ("_verify_param_shape_across_processes", "/v/torch/distributed/utils.py")}
    assert xe.ddp_collective(None, ddp)
    assert xe.ddp_collective(None, {0: ("_pre_forward", "/v/torch/nn/parallel/distributed.py")})
    assert not xe.ddp_collective(None, {0: ("all_reduce", "/v/torch_xla/core/xla_model.py")})
    assert not xe.ddp_collective(None, {0: ("_sync_module_states", "/w/my_own_helpers.py")})  # the user's namesake
    # the bucket rebuild before the second forward, from a real abort dump
    rdv = xe.Rendezvous()
    now = time.time()
    rdv.feed(TERM.format(stamp=_stamp(now), key=KEY0).replace("all gather", "all reduce"), now)
    for ln in ["Fatal Python error: Aborted", "", "Thread 0x00007f965e7fc6c0 (most recent call first):",
               '  File "/v/site-packages/torch/nn/parallel/distributed.py", line 1546 in _pre_forward',
               '  File "/v/site-packages/torch/nn/parallel/distributed.py", line 1657 in forward']:
        rdv.feed(ln, now)
    assert rdv.ddp_frame == "_pre_forward"
    # a thread whose innermost frame is elsewhere does not count, even with DDP further out
    rdv = xe.Rendezvous()
    rdv.feed(TERM.format(stamp=_stamp(now), key=KEY0), now)
    for ln in ["Fatal Python error: Aborted", "Thread 0x1 (most recent call first):",
               '  File "/w/_faults.py", line 66 in at_step',
               '  File "/v/site-packages/torch/nn/parallel/distributed.py", line 1657 in forward']:
        rdv.feed(ln, now)
    assert rdv.ddp_frame is None


def test_lines_before_any_rendezvous_are_ignored():
    rdv = xe.Rendezvous()
    for ln in DUMP:  # a crash with no rendezvous: not XLA's collective timeout
        assert rdv.feed(ln, time.time()) is None
    assert not rdv.keys and rdv.aborted is None and rdv.ddp_frame is None and not rdv.stalled


@pytest.mark.parametrize("code", ["xla-ddp-thread-collectives", "replicas-differ-from-start-xla",
                                  "replicas-differ-from-start-ddp", "replicas-differ-from-start", "replicas-drifted"])
def test_engine_raised_hints_exist_once(code):
    m = HintMatcher()
    assert m.raise_code(code) is by_code(code) and m.raise_code(code) is None


def test_ddp_thread_hint_gives_the_projects_fix():
    fix = by_code("xla-ddp-thread-collectives").fix
    assert "init_sync=False" in fix and "xla-ddp-backend" in fix and "_rebuild_buckets" in fix


def test_keys_are_described_in_op_id_order():
    rdv = xe.Rendezvous()
    now = time.time()
    for k in (KEY1.replace("op_id=1", "op_id=10"), KEY1, KEY0):
        rdv.feed(WAIT.format(stamp=_stamp(now), key=k), now)
    assert rdv.describe() == "all gather (3 rendezvous keys: op_id 0, 1, 10)"


def test_arrivals_are_said_for_the_keys_whose_termination_line_was_read():
    rdv = _split_rdv()
    now = time.time()
    rdv.feed(TERM.format(stamp=_stamp(now), key=KEY1), now)  # XLA aborted before printing the other one
    assert rdv.describe() == "all gather (2 rendezvous keys: op_id 0, 1; 1 of 2 replicas arrived in op_id 1)"
