"""The injected code: inert unless asked, harmless anywhere, and reporting from unmodified DDP scripts."""
from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from tests.support.engine import INJECT, loss_steps, strict_reports as reports
from tests.support.slurm_cluster import free_ports
from tests.support.wait import wait_until

pytestmark = pytest.mark.main_suite("the ranks' injected code: imports torch in the test process")

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(INJECT))
import ddptui_report  # noqa: E402

_SCRUB = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "DDP_FAULT",
          "DDP_STEPS", "DDPTUI", "DDPTUI_PID", "DDPTUI_XLA", "PYTHONPATH", "SLURMD_NODENAME", "GROUP_RANK",
          "GROUP_WORLD_SIZE")


def env_with(pythonpath: str = str(INJECT), **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _SCRUB}
    env.update(PYTHONPATH=pythonpath, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
    env.update(extra)
    return env


def run_py(tmp: Path, code: str, timeout: float = 60, **env) -> subprocess.CompletedProcess:
    script = tmp / "prog.py"
    script.write_text(textwrap.dedent(code))
    return subprocess.run([sys.executable, str(script)], env=env_with(**env), capture_output=True, text=True,
                          timeout=timeout, start_new_session=True, cwd=tmp)


STATE = """
import faulthandler, json, sys
import sitecustomize
print(json.dumps({"site": sitecustomize.__file__, "fh": faulthandler.is_enabled(),
                  "hook": sys.excepthook is sys.__excepthook__,
                  "meta": [type(f).__name__ for f in sys.meta_path], "torch": "torch" in sys.modules}))
"""


def state(p: subprocess.CompletedProcess) -> dict:
    return json.loads([x for x in p.stdout.splitlines() if x.startswith("{")][-1])


@pytest.mark.timeout(60)
@pytest.mark.parametrize("env", [{"RANK": "0"}, {"DDPTUI": "1"}, {"DDPTUI": "0", "RANK": "0"}],
                         ids=["no-DDPTUI", "launcher-without-RANK", "DDPTUI=0"])
def test_inert_unless_enabled_on_a_rank(tmp_path, env):
    p = run_py(tmp_path, STATE, **env)
    assert p.returncode == 0, p.stderr
    s = state(p)
    assert s["site"] == str(INJECT / "sitecustomize.py")
    assert not s["fh"] and s["hook"] and "_PostImportFinder" not in s["meta"] and not s["torch"]
    assert "@ddptui" not in p.stdout and p.stderr == ""


@pytest.mark.timeout(60)
def test_active_rank_without_torch_is_harmless(tmp_path):
    p = run_py(tmp_path, STATE + "print('hi')\n", DDPTUI="1", RANK="1", WORLD_SIZE="2", LOCAL_RANK="1",
               DDPTUI_PID="not-a-pid")
    assert p.returncode == 0 and p.stderr == "", p.stderr
    s = state(p)
    assert s["fh"] and not s["hook"] and "_PostImportFinder" in s["meta"] and not s["torch"]
    assert p.stdout.splitlines()[-1] == "hi"
    (hello,) = reports(p.stdout)
    assert hello["k"] == "hello" and hello["r"] == 1 and hello["world"] == 2 and hello["local"] == 1
    assert isinstance(hello["pid"], int) and hello["host"]
    assert hello["node"] == hello["host"]  # no launcher that names nodes: the host is the node


@pytest.mark.timeout(60)
@pytest.mark.parametrize("launcher, node", [
    ({"SLURMD_NODENAME": "cn07"}, "cn07"),
    ({"SLURMD_NODENAME": "cn07", "GROUP_RANK": "1", "GROUP_WORLD_SIZE": "2"}, "cn07"),  # torchrun under Slurm
    ({"GROUP_RANK": "1", "GROUP_WORLD_SIZE": "2"}, "node1"),
    ({"GROUP_RANK": "0", "GROUP_WORLD_SIZE": "1"}, None),  # one node: the host
], ids=["slurm", "torchrun-under-slurm", "torchrun-multinode", "torchrun-one-node"])
def test_hello_names_the_node_as_the_launcher_does(tmp_path, launcher, node):
    p = run_py(tmp_path, "import socket; print(socket.gethostname())\n", DDPTUI="1", RANK="0", WORLD_SIZE="1",
               **launcher)
    assert p.returncode == 0 and p.stderr == "", p.stderr
    (hello,) = reports(p.stdout)
    host = p.stdout.splitlines()[-1]
    assert hello["host"] == host
    assert hello["node"] == (node or host)


@pytest.mark.timeout(150)
def test_two_torchrun_agents_name_their_ranks_node0_and_node1(tmp_path):
    """Two real torchrun agents (--nnodes=2, c10d rendezvous on this host) run a plain DDP script: each rank's hello
    names the node by torchrun's node (group) rank; with one rank per node, rank r runs on node r."""
    import socket as sk
    with sk.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    script = REPO / "tests" / "fixtures" / "ddp_seeded_model_one_step.py"
    torchrun = str(Path(sys.executable).with_name("torchrun"))
    argv = [torchrun, "--nnodes=2", "--nproc-per-node=1", "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{port}",
            "--rdzv-id=h5-nodes", str(script)]
    env = env_with(DDPTUI="1")
    procs = [subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              start_new_session=True, cwd=tmp_path) for _ in range(2)]
    try:
        outs = [p.communicate(timeout=120) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
    assert [p.returncode for p in procs] == [0, 0], [o[1][-2000:] for o in outs]
    hellos = sorted((h["r"], h["node"], h["host"]) for out, _ in outs for h in reports(out) if h["k"] == "hello")
    host = sk.gethostname()
    assert hellos == [(0, "node0", host), (1, "node1", host)]


def test_node_name_decision():
    nn = ddptui_report.node_name
    assert nn({}, "h") == "h"
    assert nn({"SLURMD_NODENAME": " "}, "h") == "h"
    assert nn({"GROUP_RANK": "3", "GROUP_WORLD_SIZE": "8"}, "h") == "node3"
    assert nn({"GROUP_RANK": "x", "GROUP_WORLD_SIZE": "8"}, "h") == "h"
    assert nn({"GROUP_WORLD_SIZE": "8"}, "h") == "h"


@pytest.mark.timeout(60)
def test_chains_to_the_next_sitecustomize(tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    (other / "sitecustomize.py").write_text("import os\nos.write(1, b'chained-ok\\n')\n")
    for extra in ({}, {"DDPTUI": "1", "RANK": "0"}):
        p = run_py(tmp_path, STATE, pythonpath=f"{INJECT}:{other}", **extra)
        assert p.returncode == 0, p.stderr
        assert p.stdout.splitlines().count("chained-ok") == 1
        assert state(p)["site"] == str(INJECT / "sitecustomize.py")


@pytest.mark.timeout(60)
def test_uncaught_exceptions_are_reported_then_handled_as_before(tmp_path):
    p = run_py(tmp_path, """
        import threading
        def worker():
            raise KeyError("in-thread")
        t = threading.Thread(target=worker); t.start(); t.join()
        def main():
            raise ValueError("boom")
        main()
        """, DDPTUI="1", RANK="3")
    assert p.returncode == 1
    assert "Exception in thread" in p.stderr and "ValueError: boom" in p.stderr
    excs = [x for x in reports(p.stdout) if x["k"] == "exc"]
    assert [(x["r"], x["type"], x["msg"]) for x in excs] == [(3, "KeyError", "'in-thread'"), (3, "ValueError", "boom")]
    assert excs[1]["where"] == f"{tmp_path / 'prog.py'}:7"
    assert excs[1]["tb"][-1] == "ValueError: boom" and len(excs[1]["tb"]) <= 15


@pytest.mark.timeout(60)
def test_sigusr1_dumps_every_thread_to_stderr(tmp_path):
    (tmp_path / "prog.py").write_text(textwrap.dedent("""
        import os, time
        def waiting_here():
            time.sleep(60)
        os.write(1, b"ready\\n")
        waiting_here()
        """))
    err = open(tmp_path / "err.txt", "wb")
    proc = subprocess.Popen([sys.executable, str(tmp_path / "prog.py")], stdout=subprocess.PIPE, stderr=err,
                            env=env_with(DDPTUI="1", RANK="0", DDPTUI_PID=str(os.getpid())),
                            start_new_session=True)
    try:
        while proc.stdout.readline().strip() != b"ready":
            assert proc.poll() is None
        def dumped() -> str | None:
            proc.send_signal(signal.SIGUSR1)  # again: the first may land before waiting_here() is entered
            time.sleep(0.5)
            text = (tmp_path / "err.txt").read_text()
            return text if "waiting_here" in text else None
        text = wait_until(dumped, 20, "a stack dump inside waiting_here", step=0,
                          seen=lambda: (tmp_path / "err.txt").read_text())
        assert "most recent call first" in text and "waiting_here" in text, text
        assert proc.poll() is None  # a stack dump, not a death
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
        err.close()


@pytest.mark.timeout(90)
def test_step_hook_counts_and_throttles(tmp_path):
    p = run_py(tmp_path, """
        import time, torch
        w = torch.nn.Parameter(torch.ones(3))
        opt = torch.optim.SGD([w], lr=0.01)
        t0 = time.monotonic()
        for _ in range(300):
            opt.zero_grad(); (w * w).sum().backward(); opt.step(); time.sleep(0.002)
        print("elapsed", time.monotonic() - t0)
        """, DDPTUI="1", RANK="0")
    assert p.returncode == 0, p.stderr
    elapsed = float(p.stdout.split("elapsed ")[1].split()[0])
    steps = [x["step"] for x in reports(p.stdout) if x["k"] == "step"]
    assert steps[-1] == 300 and steps == sorted(set(steps))
    assert 2 <= len(steps) <= 10 * elapsed + 2, (len(steps), elapsed)  # about one line per 0.1 s, not per step
    assert not [x for x in reports(p.stdout) if x["k"] == "digest"]  # no DDP model, nothing to digest


@pytest.mark.timeout(90)
def test_progress_lines_carry_the_ranks_own_step_clock(tmp_path):
    p = run_py(tmp_path, """
        import time, torch
        w = torch.nn.Parameter(torch.ones(3))
        opt = torch.optim.SGD([w], lr=0.01)
        for i in range(60):
            opt.zero_grad(); (w * w).sum().backward(); opt.step()
            if i < 40:
                time.sleep(0.03)  # steps 2..41 take at least 30 ms each
        """, DDPTUI="1", RANK="0")
    assert p.returncode == 0, p.stderr
    lines = [x for x in reports(p.stdout) if x["k"] == "step"]
    assert 2 <= len(lines) < 60  # still batched
    assert all(x["at"][0] == x["step"] for x in lines)  # stamped at the step the line reports
    ats = [x["at"] for x in lines]
    assert [a[0] for a in ats] == sorted({a[0] for a in ats}) and [a[1] for a in ats] == sorted(a[1] for a in ats)
    offset = time.time() - time.monotonic()  # and the same moment on the wall clock, for ranks on other nodes
    assert all(abs(a[2] - a[1] - offset) < 0.05 for a in ats), (ats, offset)
    timed = {}  # step -> its own duration, from the dt lists (newest last, ending at the line's step)
    for x in lines:
        for k, d in enumerate(reversed(x.get("dt", []))):
            timed[x["step"] - k] = d
    assert set(timed) == set(range(2, 61))  # every step but the first, one by one (at most 64 per line)
    assert all(timed[n] >= 0.03 for n in range(2, 42)), timed
    for a, b in zip(lines, lines[1:]):  # a line's durations fit in the time since the previous line
        span = [timed[n] for n in range(a["step"] + 1, b["step"] + 1)]
        assert sum(span) == pytest.approx(b["at"][1] - a["at"][1], abs=1e-4)


PLAIN_DDP = """
import os, sys
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

def main():
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    ddp = DDP(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    x = torch.randn(16, 4) + dist.get_rank()
    for _ in range(7):
        opt.zero_grad(); ddp(x).pow(2).mean().backward(); opt.step()
    dist.barrier()
    dist.destroy_process_group()
    return ddp

if __name__ == "__main__":
    if sys.argv[1] == "global":
        kept = main()  # alive until exit: digested by the atexit path
    else:
        main()  # the wrapper dies when main() returns: digested by its finalizer
    print("plain_done")
"""


@pytest.mark.timeout(150)
@pytest.mark.parametrize("scope", ["local", "global"])
def test_unmodified_ddp_script_gets_steps_and_digests(tmp_path, scope):
    script = tmp_path / "plain.py"
    script.write_text(PLAIN_DDP)
    assert "ddptui" not in PLAIN_DDP
    # Spawned env:// style, each rank on its own: under torchrun one rank's exit abort (below) makes the agent
    # SIGTERM the other, maybe before its atexit digest, which is torch's doing and not what this test is about.
    [port] = free_ports(1)
    outs, procs = {}, {}
    try:
        for r in (0, 1):
            outs[r] = (tmp_path / f"{r}.out", tmp_path / f"{r}.err")
            with open(outs[r][0], "wb") as out, open(outs[r][1], "wb") as err:
                procs[r] = subprocess.Popen(
                    [sys.executable, str(script), scope], cwd=tmp_path, stdout=out, stderr=err,
                    start_new_session=True,
                    env=env_with(DDPTUI="1", RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE="2", LOCAL_WORLD_SIZE="2",
                                 MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port)))
        for r in (0, 1):
            procs[r].wait(timeout=120)
    finally:
        for p in procs.values():
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(10)
    for r in (0, 1):
        rank_err = outs[r][1].read_text()
        if procs[r].returncode != 0:
            # torch's own exit bug, not ours: a DDP model alive past destroy_process_group until interpreter exit
            # makes a gloo rank abort after its last line, without ddptui too (1 of 40 plain runs of this script
            # under load, 2026-12-03). The digests were written before it; faulthandler (enabled by ddptui) adds
            # its "Fatal Python error: Aborted" with no Python frame after it.
            assert scope == "global" and procs[r].returncode == -signal.SIGABRT, (r, procs[r].returncode, rank_err)
            assert "terminate called without an active exception" in rank_err, rank_err
            assert "Traceback (most recent call last)" not in rank_err, rank_err
        else:
            assert rank_err.strip() == "", rank_err
    digests = {}
    for r in (0, 1):
        out = outs[r][0].read_text()
        assert "plain_done" in out
        reps = reports(out)
        assert [x["k"] for x in reps if x["k"] == "hello"] == ["hello"]
        assert [x["step"] for x in reps if x["k"] == "step"][-1] == 7
        dig = [x for x in reps if x["k"] == "digest"]
        assert len(dig) == 1 and dig[0]["source"] == "ddp" and dig[0]["r"] == r
        digests[r] = dig[0]["params"]
    assert digests[0] == digests[1]
    assert [p[0] for p in digests[0]] == ["0.weight", "0.bias", "2.weight", "2.bias"]
    assert [p[2] for p in digests[0]] == [[8, 4], [8], [1, 8], [1]]


@pytest.mark.timeout(60)
def test_report_helpers_in_process(capfd, monkeypatch):
    import numpy as np
    import torch

    class Wrapper(torch.nn.Module):  # named like DDP's: parameters come out as "module.*"
        def __init__(self, inner):
            super().__init__()
            self.module = inner

    monkeypatch.setenv("RANK", "2")
    inner = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.Linear(2, 1, bias=False)).to(torch.float64)
    wrapped = Wrapper(inner)
    assert not ddptui_report.was_reported(inner)
    ddptui_report.digests(wrapped)
    assert ddptui_report.was_reported(inner) and ddptui_report.was_reported(wrapped)
    ddptui_report.loss(5, torch.tensor(0.25))
    ddptui_report.step(6)
    ddptui_report.verdict(False, "nope")  # the progress still pending goes out first
    ddptui_report.set_rank_resolver(lambda: 9)
    try:
        ddptui_report.emit("hello", world=1)
        ddptui_report.set_rank_resolver(lambda: None)
        ddptui_report.emit("hello", world=1)
    finally:
        ddptui_report.set_rank_resolver(None)
    try:
        def inner_fn():
            raise OSError("disk")
        inner_fn()
    except OSError:
        ddptui_report.exception(*sys.exc_info())
    out = capfd.readouterr().out
    assert out.endswith("\n") and all(line.startswith("@ddptui {") for line in out.splitlines())
    dig, loss, step, verdict, h9, h2, exc = reports(out)
    expected = [[n, hashlib.blake2b(np.ascontiguousarray(p.detach().numpy()).tobytes(), digest_size=16).hexdigest(),
                 list(p.shape), "torch.float64"] for n, p in inner.named_parameters()]
    assert dig == {"k": "digest", "r": 2, "source": "explicit", "params": expected}
    assert [p[0] for p in dig["params"]] == ["0.weight", "0.bias", "1.weight"]
    assert loss.pop("at")[0] == 5 and step.pop("at")[0] == 6  # the rank's clock: [step, monotonic time, wall time]
    assert len(step.pop("dt")) == 1  # step 6 came right after step 5: its duration, by the rank's clock
    assert loss == {"k": "loss", "r": 2, "steps": [[5, 0.25]]}
    assert step == {"k": "step", "r": 2, "step": 6}
    assert verdict == {"k": "verdict", "r": 2, "ok": False, "text": "nope"}
    assert h9["r"] == 9 and h2["r"] == 2
    assert exc["type"] == "OSError" and exc["msg"] == "disk"
    assert exc["where"].endswith(f"test_inject.py:{inner_fn.__code__.co_firstlineno + 1}")
    monkeypatch.delenv("RANK")
    ddptui_report.step(1)
    ddptui_report.flush_progress()
    [last] = reports(capfd.readouterr().out)
    assert last.pop("at")[0] == 1 and last == {"k": "step", "r": None, "step": 1}


@pytest.mark.timeout(60)
def test_hook_steps_defer_to_the_ranks_own_reports_only_for_the_step_in_flight(tmp_path):
    p = run_py(tmp_path, """
        import os, ddptui_report
        ddptui_report.FLUSH_EVERY = 1e9  # one flush, where this program asks for it
        os.environ["RANK"] = "0"
        for n in range(1, 6):  # dense: the rank reports every step after the optimizer's (the hook's) count
            ddptui_report.count_step()
            ddptui_report.loss(n, 1.0 / n)
        ddptui_report.count_step()  # step 6 traced (XLA) or in flight, not reported by the rank yet
        os.environ["RANK"] = "1"
        for n in range(1, 26):  # sparse: the rank reports every 10th step only
            ddptui_report.count_step()
            if n % 10 == 0:
                ddptui_report.loss(n, 1.0 / n)
        ddptui_report.flush_progress()
        """)
    assert p.returncode == 0, p.stderr
    reps = reports(p.stdout)
    steps = {r: [x["step"] for x in reps if x["k"] == "step" and x["r"] == r] for r in (0, 1)}
    losses = {r: loss_steps([x for x in reps if x["r"] == r]) for r in (0, 1)}
    assert losses == {0: [1, 2, 3, 4, 5], 1: [10, 20]}
    assert steps == {0: [], 1: [25]}  # rank 0 stays at its own step 5; rank 1's hook fills in past step 20


@pytest.mark.timeout(60)
def test_report_thread_never_holds_the_process_at_exit(tmp_path):
    # The (non-daemon) report thread's period is made endless: only the interpreter's exit can wake it, so a
    # thread that held the process would hold it for good (run_py's timeout), whatever the machine's load.
    p = run_py(tmp_path, """
        import threading, ddptui_report
        ddptui_report.FLUSH_EVERY = 1e9
        for n in (1, 2, 3):
            ddptui_report.loss(n, 0.5)
        assert [t.name for t in threading.enumerate() if t.name == "ddptui-report"] == ["ddptui-report"]
        ddptui_report.loss(4, 0.25)  # all four still pending at exit: written by the exit hook
        print("leaving", flush=True)
        """, timeout=45, RANK="0")
    assert p.returncode == 0 and "leaving" in p.stdout, p.stderr
    assert loss_steps(reports(p.stdout)) == [1, 2, 3, 4]


def test_a_batch_is_the_leading_dimension_of_the_first_tensor_among_a_forwards_inputs():
    import torch

    size = lambda *args, **kwargs: ddptui_report.batch_size_of(args, kwargs, torch.Tensor)  # noqa: E731
    x, ids = torch.zeros(16, 3), torch.zeros(8, 128, dtype=torch.long)
    assert size(x) == 16
    assert size(torch.tensor(0.5), x) == 16  # a 0-d tensor (a temperature) carries no batch
    assert size(input_ids=ids, attention_mask=torch.ones(8, 128)) == 8  # model(**batch)
    assert size((x, torch.zeros(4)), ids) == 16  # positional first, into tuples
    assert size([{"image": torch.zeros(5, 3, 4, 4)}]) == 5  # lists of dicts
    assert size("text", 3, None, flag=True) is None
    assert size(((((((torch.zeros(2, 2),),),),),),)) is None  # buried deeper than any batch is looked for


@pytest.mark.timeout(60)
def test_samples_per_step_count_training_forwards_since_the_last_optimizer_step(capfd, monkeypatch):
    import torch

    monkeypatch.setenv("RANK", "3")
    model = torch.nn.Linear(4, 1)
    hook = model.register_forward_pre_hook(ddptui_report.count_forward, with_kwargs=True)
    try:
        model(torch.zeros(10, 4))
        model(input=torch.zeros(6, 4))  # a second micro-batch, passed by keyword
        with torch.no_grad():
            model(torch.zeros(100, 4))  # evaluation: not training throughput
        model.eval()
        model(torch.zeros(100, 4))
        model.train()
        ddptui_report.count_step()
        ddptui_report.count_step()  # a second optimizer in the same step: it saw no forward, the count stands
        ddptui_report.flush_progress()
        line = reports(capfd.readouterr().out)[-1]  # (the first step may have gone out at once)
        assert (line["step"], line["b"]) == (2, 16)
        model(torch.zeros(7, 4))
        ddptui_report.count_step()
        ddptui_report.flush_progress()
        line = reports(capfd.readouterr().out)[-1]
        assert (line["step"], line["b"]) == (3, 7)
    finally:
        hook.remove()
        for kept in (ddptui_report._forward_samples, ddptui_report._step_samples, ddptui_report._hook_counts,
                     ddptui_report._stamps, ddptui_report._dts):
            kept.pop(3, None)  # this rank's counts start over for the next test


COMPILED_DDP = """
import sys
import torch
import torch.distributed as dist
from torch._dynamo.utils import counters
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo", store=dist.TCPStore("127.0.0.1", 0, 1, True), rank=0, world_size=1)
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
if sys.argv[1] == "outside":
    net = torch.compile(DDP(model), backend="eager")
else:
    net = DDP(torch.compile(model, backend="eager"))
opt = torch.optim.SGD(net.parameters(), lr=0.1)
for step in range(4):
    if step == 2:
        graphs = counters["stats"]["unique_graphs"]
    opt.zero_grad()
    net(torch.randn(16, 4)).pow(2).mean().backward()
    with torch.no_grad():
        net(torch.randn(50, 4))  # a look at held-out data: not training throughput
    opt.step()
print("recompiled", counters["stats"]["unique_graphs"] - graphs, flush=True)
dist.destroy_process_group()
"""


@pytest.mark.timeout(180)
@pytest.mark.parametrize("where", ["outside", "inside"])
def test_a_ddp_model_under_torch_compile_says_its_samples_without_recompiling(tmp_path, where):
    """torch.compile(DDP(model)): DDP's own hook runs inside the compiled call and stays silent there; the compile
    wrapper counts the batch instead, once. DDP(torch.compile(model)): DDP's hook counts, the inner wrapper not."""
    (tmp_path / "prog.py").write_text(COMPILED_DDP)
    p = subprocess.run([sys.executable, "prog.py", where], env=env_with(DDPTUI="1", RANK="0", WORLD_SIZE="1"),
                       capture_output=True, text=True, timeout=150, start_new_session=True, cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "recompiled 0" in p.stdout, p.stdout[-2000:]
    steps = [x for x in reports(p.stdout) if x["k"] == "step"]
    assert steps and steps[-1]["step"] == 4, steps
    assert {x.get("b") for x in steps} == {16}, steps


@pytest.mark.timeout(120)
def test_a_compiled_model_keeps_one_graph_and_its_samples_go_untold(tmp_path):
    """Traced into a torch.compile'd model, a counting hook became a guard: a new graph every step (3 for 3)."""
    p = run_py(tmp_path, """
        import torch, ddptui_report
        from torch._dynamo.utils import counters
        model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
        model.register_forward_pre_hook(ddptui_report.count_forward, with_kwargs=True)
        compiled = torch.compile(model, backend="eager", fullgraph=True)  # fullgraph: a graph break is an error
        for _ in range(3):
            compiled(torch.zeros(16, 4)).sum().backward()
        print("graphs", counters["stats"]["unique_graphs"], "counted", dict(ddptui_report._forward_samples))
        """, RANK="0")
    assert p.returncode == 0, p.stderr[-3000:]
    assert "graphs 1 counted {}" in p.stdout, p.stdout
