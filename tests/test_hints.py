"""Hints from real rank output (port in use, no CUDA, model mismatch, timeouts) and from the documents' messages."""
from __future__ import annotations

import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.any_python

sys.path.insert(0, str(Path(__file__).resolve().parent / "fixtures"))
import runhelp  # noqa: E402

from ddptui.runners.evidence.hints import Hint, HintMatcher, all_hints, by_code  # noqa: E402
from ddptui.runners.evidence.kill_reading import Reading  # noqa: E402


def _run(argv_or_popen, timeout: float = 90) -> str:
    """Run to the end (own session, killed on the way out); combined stdout+stderr."""
    p = argv_or_popen
    try:
        out, _ = p.communicate(timeout=timeout)
    finally:
        runhelp.kill_session(p)
    return out


def _torchrun(script: str, extra_args=(), **env) -> list[tuple[int | None, str]]:
    """(rank, line) of a 2-rank run: each rank's own files (torchrun -r 3), then the launcher's output (rank None)."""

    with tempfile.TemporaryDirectory() as d:
        out = _run(runhelp.torchrun(script, Path(d), extra_args=tuple(extra_args), env=runhelp.rank_env(**env),
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
        lines = []
        for rank in (0, 1):
            for name in ("stderr.log", "stdout.log"):
                try:
                    lines += [(rank, ln) for ln in runhelp.rank_file(Path(d), rank, name).read_text(errors="replace").splitlines()]
                except FileNotFoundError:
                    pass
    return lines + [(None, ln) for ln in out.splitlines()]


def _codes(lines) -> dict[str, tuple[int | None, str]]:
    if isinstance(lines, str):
        lines = runhelp.lines_by_rank(lines)
    m = HintMatcher()
    got = {}
    for rank, line in lines:
        h = m.feed(rank, line)
        if h is not None:
            got[h.code] = (rank, line)
    return got


def _text(lines) -> str:
    return "\n".join(ln for _, ln in lines)


@pytest.mark.timeout(120)
def test_real_address_in_use():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        out = _torchrun("gloo_timeout.py", ["--master-addr", "127.0.0.1", "--master-port", str(port)])
    got = _codes(out)
    assert "address-in-use" in got, _text(out)[-3000:]
    assert "EADDRINUSE" in got["address-in-use"][1]


@pytest.mark.timeout(120)
def test_real_cuda_unavailable():
    out = _torchrun("need_cuda.py")
    got = _codes(out)
    assert "cuda-unavailable" in got, _text(out)[-3000:]
    assert "Torch not compiled with CUDA enabled" in _text(out)  # what this CPU torch really says
    assert list(got).count("cuda-unavailable") == 1


@pytest.mark.timeout(120)
def test_real_nccl_without_gpu():
    got = _codes(_torchrun("need_cuda.py", NEED_CUDA_MODE="nccl"))
    assert "cuda-unavailable" in got


@pytest.mark.timeout(120)
@pytest.mark.parametrize("mode", ["count", "shape"])
def test_real_ddp_model_mismatch(mode):
    out = _torchrun("mismatch_ddp.py", MISMATCH_MODE=mode)
    got = _codes(out)
    assert "ddp-model-mismatch" in got, _text(out)[-3000:]
    if mode == "count":
        assert "DDP expects same model across all ranks" in got["ddp-model-mismatch"][1]
    else:  # rank 1 fails the shape check; rank 0, in the broadcast, loses its peer
        assert got["ddp-model-mismatch"][0] == 1 and got.get("peer-closed", (None,))[0] == 0, got


@pytest.mark.timeout(120)
def test_real_gloo_collective_timeout():
    out = _torchrun("gloo_timeout.py", PG_TIMEOUT="3", LATE_BY="8")
    got = _codes(out)
    assert "collective-timeout" in got, _text(out)[-3000:]
    assert got["collective-timeout"][0] == 0 and "Timed out waiting 3000ms for recv" in got["collective-timeout"][1]


@pytest.mark.timeout(120)
def test_real_store_timeout_when_a_rank_never_joins():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code = "import datetime, torch.distributed as dist; dist.init_process_group('gloo', timeout=datetime.timedelta(seconds=3))"
    env = runhelp.rank_env(RANK="0", WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    out = _run(subprocess.Popen([runhelp.PY, "-c", code], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, start_new_session=True))
    got = _codes(out)
    assert "store-timeout" in got, out[-3000:]
    assert "1/2 clients joined" in got["store-timeout"][1]


DOC_LINES = [
    # mirage tutorial, Troubleshooting
    ("torch.cuda.is_available() is False.", "cuda-unavailable"),
    ("RuntimeError: No HIP GPUs are available", "cuda-unavailable"),
    ("rank 1: Duplicate GPU detected : rank 0 and rank 1 both on CUDA device 1000", "duplicate-gpu"),
    ("NCCL error in: ProcessGroupNCCL.cpp:1970, invalid usage, NCCL version 2.21.5 ncclInvalidUsage", "duplicate-gpu"),
    ("Error: KMD preload library not found", "kmd-preload"),
    # XLA reference, key points
    ("Each process sees xla:0 — this is correct (its own device)", "xla-device-zero"),
    ("# gradient_as_bucket_view=True is required for XLA DDP", "xla-bucket-view"),
    ("No `device_ids=[rank]` for DDP — XLA handles assignment", "xla-device-ids"),
    ("xr.initialize_cache('/tmp/xla_cache', readonly=False): cache directory already in use", "xla-cache-shared"),
    # XLA field notes
    ("rendezvous.cc:100] Expected 2 threads to join the rendezvous, but not all of them arrived on time.", "xla-rendezvous-deadlock"),
    ("concurrent.futures.process.BrokenProcessPool: A process in the process pool was terminated abruptly", "xla-rendezvous-deadlock"),
    ("E0000 Failed to deserialize executable: UNIMPLEMENTED: Deserializing serialized executable not supported.", "xla-deserialize-noise"),
    ("Under torchrun (two processes, `xla://`) each process silently gets world size 1", "xla-torchrun-world1"),
    # torchrun field notes and common ones
    ("torch.distributed.DistNetworkError: ... port: 29500, useIpv6: false, code: -98, name: EADDRINUSE, message: address already in use", "address-in-use"),
    ("OSError: [Errno 98] Address already in use", "address-in-use"),
    ("RuntimeError: [../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting 20000ms for recv operation to complete", "collective-timeout"),
    ("[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5, OpType=ALLREDUCE) ran for 600000 milliseconds", "collective-timeout"),
    ("torch.distributed.DistStoreError: Timed out after 901 seconds waiting for clients. 1/2 clients joined.", "store-timeout"),
    ("RuntimeError: [pair.cc:553] Connection closed by peer [127.0.0.1]:16621. This is typically caused by a remote worker crashing.", "peer-closed"),
    ("RuntimeError: DDP expects same model across all ranks, but Rank 0 has 4 params, while rank 1 has inconsistent 0 params.", "ddp-model-mismatch"),
    ("UserWarning: Failed to initialize NumPy: No module named 'numpy' (Triggered internally at torch/csrc/utils/tensor_numpy.cpp:84.)", "numpy-missing"),
    ("launching with TORCH_DISTRIBUTED_DEBUG=DETAIL", "debug-detail-segfault"),
    ("terminate called without an active exception", "exit-abort-no-barrier"),
    ("[12345.678] Out of memory: Killed process 4242 (python) total-vm:123kB", "oom-kill"),
]


@pytest.mark.parametrize("line,code", DOC_LINES, ids=[c for _, c in DOC_LINES])
def test_document_messages(line, code):
    h = HintMatcher().feed(0, line)
    assert h is not None and h.code == code, h
    assert h.title and h.explanation and h.fix


NORMAL = [
    "[rank 0] loss: 30.5666 -> 0.2634 over 50 steps",
    "[rank 0] all ranks converged with identical replicas",
    "ddp_mlp_ok",
    "Setting OMP_NUM_THREADS environment variable for each process to be 1 in default",
    "[rank 1] step 12 loss 0.0362",
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
    "rank 0 using device xla:0",
    "compiled graph, cache hit",
    "W1202 13:00:51.048000 6568 api.py:1028] Sending process 6575 closing signal SIGTERM",
    "@ddptui {\"k\": \"step\", \"r\": 0, \"step\": 3}",
]


def test_ordinary_lines_raise_nothing():
    m = HintMatcher()
    assert [m.feed(0, ln) for ln in NORMAL] == [None] * len(NORMAL)


def test_xla0_from_two_ranks_is_explained_once():
    m = HintMatcher()
    assert m.feed(0, "rank 0 using device xla:0") is None
    assert m.feed(0, "rank 0 using device xla:0") is None
    assert m.feed(1, "rank 1 using device xla:0").code == "xla-device-zero"
    assert m.feed(2, "rank 2 using device xla:0") is None


def test_each_hint_at_most_once_per_run():
    line = "Connection closed by peer [127.0.0.1]:1. This is typically caused by a remote worker crashing"
    m = HintMatcher()
    assert m.feed(0, line).code == "peer-closed"
    assert m.feed(1, line) is None and m.feed(0, line) is None
    assert m.feed(0, "DDP expects same model across all ranks").code == "ddp-model-mismatch"
    assert HintMatcher().feed(0, line).code == "peer-closed"  # a new run starts afresh


@pytest.mark.parametrize("rc,kw,code", [
    (-9, {}, None), (137, {}, None),  # a SIGKILL's hint waits for its memory evidence: for_kill
    (-6, {"completed": True}, "exit-abort-no-barrier"), (134, {"completed": True}, "exit-abort-no-barrier"),
    (-11, {"in_process": True}, "mirage-in-process"), (-6, {"in_process": True}, "mirage-in-process"),
    (-11, {"env": {"TORCH_DISTRIBUTED_DEBUG": "DETAIL"}}, "debug-detail-segfault"),
    (-6, {}, None), (-11, {}, None), (1, {}, None), (0, {}, None), (-15, {}, None),
])
def test_for_exit(rc, kw, code):
    h = HintMatcher().for_exit(0, rc, **kw)
    assert (h.code if h else None) == code


def test_for_exit_once_and_shared_with_lines():
    m = HintMatcher()
    assert m.feed(1, "terminate called without an active exception").code == "exit-abort-no-barrier"
    assert m.for_exit(1, -signal.SIGABRT, completed=True) is None
    assert m.for_kill(Reading("oom", "out of memory", "")).code == "oom-kill"
    assert m.for_kill(Reading("oom", "out of memory", "")) is None


def test_catalogue_codes_unique_and_engine_codes_exist():
    codes = [h.code for h in all_hints()]
    assert len(codes) == len(set(codes))
    assert isinstance(by_code("mirage-multigpu-hang"), Hint)
    m = HintMatcher()
    assert m.raise_code("mirage-multigpu-hang").code == "mirage-multigpu-hang" and m.raise_code("mirage-multigpu-hang") is None
    assert m.raise_code("xla-torchrun-world1").code == "xla-torchrun-world1"


@pytest.mark.timeout(60)
def test_feed_is_cheap_on_ordinary_lines():
    lines = [f"[rank {i % 2}] step {i} loss {1.0 / (i + 1):.4f}" for i in range(50_000)] + NORMAL * 100
    m = HintMatcher()
    t0 = time.perf_counter()
    for i, ln in enumerate(lines):
        m.feed(i % 2, ln)
    per_line = (time.perf_counter() - t0) / len(lines)
    print(f"HintMatcher.feed: {per_line * 1e6:.2f} us/line")
    assert per_line < 100e-6  # loose: the figure itself goes to the report/benchmarks


@pytest.mark.parametrize("level,code", [("oom", "oom-kill"), ("near", "oom-kill-maybe"), ("not oom", "sigkill-not-oom"),
                                        ("far", "sigkill-not-oom"), ("unknown", "sigkill")])
def test_a_sigkill_hint_fits_its_memory_evidence(level, code):
    hint = HintMatcher().for_kill(Reading(level, "", ""))
    assert hint.code == code
    lower = "lower the batch size" in hint.fix.lower()
    # less memory is the fix only where memory ran out, and only "if" where that is not confirmed
    assert lower == (level in ("oom", "near"))
    assert hint.fix.startswith("If this was the kernel's OOM killer") == (level == "near")
