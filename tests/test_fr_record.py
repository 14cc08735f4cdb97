"""Flight Recorder dumps of real gloo ranks taken with their stacks (stall, `ddptui dump`), as the record keeps them
for PyTorch's own analyzer, and torch's debug server as the stack method where ptrace is refused."""
from __future__ import annotations

import json
import os
import pickle
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from ddptui.runners import events as ev
from ddptui.runners.launch.profile.load import adhoc_profile
from ddptui.runners.session import Session
from tests.support.cli import ddptui, live_ddptui, only_run, wait_for_rank1
from tests.support.engine import Recorder
from tests.support.wait import wait_until

pytestmark = [
    pytest.mark.main_suite(
        "long end-to-end rank runs (the engine and dashboard under them are in the any_python set); its plain"
        " torchrun commands run on the test's own interpreter"),
]

FIXTURES = Path(__file__).parent / "fixtures"
BARRIER = FIXTURES / "rank_conditional_barrier.py"  # rank 0 alone calls barrier() at step 5
HEALTHY = FIXTURES / "healthy_ddp_loop.py"
TORCHFRTRACE = Path(sys.executable).with_name("torchfrtrace")


def _barrier_hang(tmp_path: Path, *overrides: str, **kw) -> tuple[Recorder, Path]:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(BARRIER)]
    profile = adhoc_profile(cmd, ["stall_after=4", "startup_grace=60", "on_stall=stop", *overrides])
    rec = Recorder()
    code = Session(profile, tmp_path / "runs", emit=rec, **kw).run()
    assert code == 3, [e for e in rec.events if not isinstance(e, ev.LogLines)][-5:]
    (stacks,) = rec.of(ev.StacksCollected)
    return rec, Path(stacks.path)


def _refusing_pyspy(tmp_path: Path) -> str:
    """A py-spy that fails as it does where ptrace is not allowed (a container without CAP_SYS_PTRACE)."""
    p = tmp_path / "py-spy"
    p.write_text('#!/bin/sh\necho "Error: Operation not permitted (os error 1)" >&2\nexit 1\n')
    p.chmod(0o755)
    return str(p)


def _last(entries: list[dict]) -> tuple:
    e = entries[-1]
    return e["collective_seq_id"], e["profiling_name"], e["input_sizes"], e["retired"]


@pytest.mark.timeout(150)
def test_stall_records_every_ranks_dump_for_torchfrtrace(tmp_path):
    rec, folder = _barrier_hang(tmp_path)
    said = json.loads((folder / "stacks.json").read_text())
    assert said["fr"] == {"0": "recorded", "1": "recorded"} and said["method"] == {"0": "py-spy", "1": "py-spy"}
    assert rec.one(ev.StacksCollected).fr == {0: "recorded", 1: "recorded"}
    dumps = {r: pickle.loads((folder / "fr" / f"rank_{r}").read_bytes()) for r in (0, 1)}
    seq, op, sizes, retired = _last(dumps[0]["entries"])
    assert (op, sizes, retired) == ("gloo:barrier", [], False)  # rank 0 waits in its barrier
    seq1, op1, _, retired1 = _last(dumps[1]["entries"])
    assert (seq1, op1, retired1) == (seq, "gloo:all_reduce", False)  # rank 1 in DDP's all_reduce, the same number
    for d in dumps.values():
        assert d["pg_config"] == {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1]"}}
        assert d["pg_status"]["0"]["last_enqueued_collective"] == seq
        assert d["pg_status"]["0"]["last_completed_collective"] == seq - 1
    out = subprocess.run([str(TORCHFRTRACE), str(folder / "fr"), "--prefix", "rank_"], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    text = out.stdout + out.stderr
    assert "KeyError" not in text and "Traceback" not in text
    assert f"Collective sequence number: {seq} has errors" in text
    assert "COLLECTIVE_TYPE_MISMATCH" in text and "'barrier' does not match found collective type: 'all_reduce'" in text


@pytest.mark.timeout(150)
def test_ptrace_refused_stacks_come_from_the_torch_debug_server(tmp_path):
    rec, folder = _barrier_hang(tmp_path, pyspy=_refusing_pyspy(tmp_path))
    got = rec.one(ev.StacksCollected)
    assert got.method == {0: "torch debug server", 1: "torch debug server"}, got.method
    main0 = [t for t in got.threads[0] if t["thread"] == "MainThread"][0]
    assert main0["frames"][0][0] == "barrier"
    assert [f for f in main0["frames"] if f[1].endswith("rank_conditional_barrier.py")][0][2] == \
        next(i for i, ln in enumerate(BARRIER.read_text().splitlines(), 1) if "RANK0_BARRIER" in ln)
    assert "Operation not permitted" in (folder / "rank0.txt").read_text()  # why py-spy was not used
    assert got.fr == {0: "recorded", 1: "recorded"}
    (hang,) = [h for h in rec.of(ev.HangVerdict) if h.path == str(folder)]
    assert "barrier" in hang.text and "all_reduce" in hang.text


@pytest.mark.timeout(150)
def test_flight_recorder_off_no_dump_and_stacks_by_faulthandler(tmp_path):
    rec, folder = _barrier_hang(tmp_path, "flight_recorder=false", pyspy=_refusing_pyspy(tmp_path))
    got = rec.one(ev.StacksCollected)
    assert got.method == {0: "faulthandler", 1: "faulthandler"}  # no debug server to ask: SIGUSR1 as before
    assert got.fr == {r: "unavailable: flight_recorder: false in the profile" for r in (0, 1)}
    assert json.loads((folder / "stacks.json").read_text())["fr"]["1"] == \
        "unavailable: flight_recorder: false in the profile"
    assert not (folder / "fr").exists()


@pytest.mark.timeout(150)
def test_stack_method_debug_server_from_the_command_line(tmp_path):
    runs = tmp_path / "runs"
    p = ddptui("--no-ui", "--stacks", "debug-server", "--set", "stall_after=4", "--", sys.executable, "-m",
               "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(BARRIER), runs_dir=runs)
    assert p.returncode == 3, p.stdout[-2000:]
    assert "(torch debug server)" in p.stdout
    said = json.loads(next(runs.glob("*/stacks/01-stall/stacks.json")).read_text())
    assert said["method"] == {"0": "torch debug server", "1": "torch debug server"}


@pytest.mark.timeout(150)
def test_dump_command_records_the_dumps_of_a_live_healthy_run(tmp_path):
    runs = tmp_path / "runs"
    runs.mkdir()
    with live_ddptui(runs, "--no-ui", "--", sys.executable, "-m", "torch.distributed.run", "--standalone",
                     "--nproc_per_node=2", str(HEALTHY)) as proc:
        deadline = wait_for_rank1(runs, "step 20 ")
        run = only_run(runs)
        wait_until(lambda: (run / "events.jsonl").read_text().count('"kind": "debug_server"') >= 2, deadline.left(),
                   "both ranks' debug servers in the record", step=0.2)
        p = ddptui("dump", str(run), runs_dir=runs)
        assert p.returncode == 0, p.stderr
        wait_until(lambda: list(run.glob("stacks/*-on-request/stacks.json")), deadline.left(), "the dump's stacks",
                   step=0.2, seen=lambda: sorted(str(p.relative_to(run)) for p in run.glob("stacks/**/*")))
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=60)
    (folder,) = [p.parent for p in run.glob("stacks/*-on-request/stacks.json")]
    assert json.loads((folder / "stacks.json").read_text())["fr"] == {"0": "recorded", "1": "recorded"}, out[-2000:]
    for r in (0, 1):
        d = pickle.loads((folder / "fr" / f"rank_{r}").read_bytes())
        ops = {e["profiling_name"] for e in d["entries"]}
        assert "gloo:all_reduce" in ops  # DDP's bucket all-reduces, one per step
        status = d["pg_status"]["0"]
        assert status["last_enqueued_collective"] >= 20 and status["last_completed_collective"] >= 19
    assert not list(folder.glob("verdict.txt"))  # a dump of a healthy run: no verdict
    assert os.path.exists(run / "summary.json")
