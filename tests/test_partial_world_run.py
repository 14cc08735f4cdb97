"""One ddptui per node, each wrapping the same `torchrun --nnodes=2 ... --rdzv-backend=c10d` line (README: any torchrun
command can be wrapped): each names its own rank by its global number and the other node's as unseen, never healthy.
On one host (two agents on a loopback endpoint) and on two network-namespaced hosts (a hang whose culprit is the other
node's rank, then that node dying)."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from tests.support.netns import NamespacesUnavailable, NetnsHosts, cannot_make_namespaces
from tests.support.wait import wait_until

pytestmark = pytest.mark.main_suite(
    "one ddptui per (namespaced) host wrapping c10d torchrun agents on the test's own interpreter")

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"


def _env(**extra: str) -> dict:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}", **extra}
    env.pop("NO_COLOR", None)
    return env


def _argv(runs: Path, endpoint: str, script: Path, *sets: str) -> list[str]:
    return [sys.executable, "-m", "ddptui.tui.cli", "--runs-dir", str(runs), "--no-ui", *sets, "--",
            "torchrun", "--nnodes=2", "--nproc_per_node=1", "--rdzv-backend=c10d", f"--rdzv-endpoint={endpoint}",
            "--rdzv-id=partial", str(script)]


def _start(argv: list[str], env: dict) -> subprocess.Popen:
    return subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _run_dir(runs: Path) -> Path:
    (d,) = list(runs.iterdir())
    return d


def _events(run: Path) -> list[dict]:
    path = run / "events.jsonl"
    if not path.exists():
        return []
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip().endswith("}")]


def _of(run: Path, kind: str) -> list[dict]:
    return [e for e in _events(run) if e["kind"] == kind]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _kill_tree(proc: subprocess.Popen) -> None:
    try:
        tree = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
    except psutil.Error:
        tree = []
    for p in tree:
        try:
            p.send_signal(signal.SIGKILL)
        except psutil.Error:
            pass
    proc.wait(timeout=30)


@pytest.mark.timeout(300)
def test_two_ddptuis_on_one_host_each_name_their_rank_by_its_global_number(runs_dir):
    endpoint = f"127.0.0.1:{_free_port()}"
    runs = [runs_dir / "a", runs_dir / "b"]
    # a plain gloo DDP job of 3 steps that prints the rendezvous torchrun gave it
    procs = [_start(_argv(r, endpoint, FIXTURES / "ddp_prints_its_rendezvous.py"), _env()) for r in runs]
    try:
        outs = [p.communicate(timeout=240)[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                _kill_tree(p)
    seen = set()
    for run_root, proc, out in zip(runs, procs, outs):
        assert proc.returncode == 0, out[-3000:]
        run = _run_dir(run_root)
        (hello,) = _of(run, "rank_hello")
        rank, other = hello["rank"], 1 - hello["rank"]
        seen.add(rank)
        assert hello["world"] == 2
        summary = json.loads((run / "summary.json").read_text())
        assert summary["world_size"] == 2 and list(summary["ranks"]) == [str(rank)], summary["ranks"]
        assert summary["unseen"] == [other]
        assert summary["ranks"][str(rank)]["steps"] == 3 and summary["ranks"][str(rank)]["status"] == "exited"
        assert "step 2 loss" in (run / f"rank{rank}.log").read_text()
        assert not (run / f"rank{other}.log").exists()
        rep = summary["replica"]
        assert rep["status"] == "incomplete" and f"rank {rank} is the only rank seen here" in rep["text"], rep
        assert "all 1 ranks" not in out and "byte-identical" not in rep["text"]
        assert "(torchrun, 1 of 2 ranks seen here)" in out, out[-2000:]
        row = next(ln.split() for ln in out.splitlines() if ln.split()[:1] == [str(other)])
        assert row[3] == "unseen", row
        assert f"rank {other} runs on another node, unseen here" in out
        assert any(e["status"] == "unseen" and e["rank"] == other for e in _of(run, "rank_state"))
        progress = {e["rank"] for e in _of(run, "progress")}
        assert progress == {rank}, progress
    assert seen == {0, 1}  # group rank order is the rendezvous's: one ddptui has each


@pytest.fixture
def hosts(tmp_path):
    why = cannot_make_namespaces()
    if why:
        pytest.skip(why)
    h = NetnsHosts(f"pw{os.getpid() % 100000}", tmp_path)
    try:
        h.create()
    except NamespacesUnavailable as e:
        pytest.skip(str(e))
    try:
        yield h
    finally:
        h.delete()
        assert not h.leftover()


def any_exited(procs):
    """A stop_if for a wait on what both ddptui do: one of them exited (with the end of its output)."""
    return lambda: next((f"a ddptui exited {p.returncode}: {p.stdout.read()[-3000:]}" for p in procs
                         if p.poll() is not None), None)


@pytest.mark.timeout(400)
def test_a_hang_on_the_other_node_then_that_node_dying_on_namespaced_hosts(hosts, runs_dir):
    # hang_ddp.py: global rank 0 sleeps before its backward at step 5, rank 1 blocks in DDP's all_reduce
    env = _env(HANG_RANK="0", HANG_STEP="5", PG_TIMEOUT="600")
    runs = [runs_dir / "node0", runs_dir / "node1"]
    sets = ("--set", "stall_after=8", "--set", "on_stall=dump")
    procs = [_start(hosts.wrap(i, _argv(runs[i], "node0:29400", FIXTURES / "hang_ddp.py", *sets)), env)
             for i in (0, 1)]
    try:
        def both_judged() -> bool:
            return all(r.exists() and any(r.iterdir()) and _of(_run_dir(r), "hang_verdict") for r in runs)
        wait_until(both_judged, 240, "a hang verdict from both nodes' ddptui", step=0.3, stop_if=any_exited(procs))
        by_rank = {}
        for i, r in enumerate(runs):
            (hello,) = _of(_run_dir(r), "rank_hello")
            by_rank[hello["rank"]] = (i, _run_dir(r))
        assert set(by_rank) == {0, 1}
        culprit_node, culprit_run = by_rank[0]
        waiting_node, waiting_run = by_rank[1]
        said = _of(culprit_run, "hang_verdict")[0]
        assert said["text"].startswith("rank 0 is stuck in culprit_wait() at hang_ddp.py"), said["text"]
        assert "rank 1 runs on another node, unseen here" in said["text"] and said["culprits"] == [0]
        said = _of(waiting_run, "hang_verdict")[0]
        assert "rank 1 entered it" in said["text"] or "rank 1 waits in" in said["text"], said["text"]
        assert "rank 0 runs on another node, unseen here" in said["text"], said["text"]
        assert "rank 0 entered it" not in said["text"] and "rank 0 waits" not in said["text"]
        assert said["waiting"] == [1] and 1 not in said["culprits"], said
        # node "culprit_node" dies: its ddptui, torchrun agent and rank, all at once
        _kill_tree(procs[culprit_node])
        out = procs[waiting_node].communicate(timeout=180)[0]
    finally:
        for p in procs:
            if p.poll() is None:
                _kill_tree(p)
    assert procs[waiting_node].returncode == 1, out[-3000:]
    crashes = _of(waiting_run, "crash_verdict")
    assert len(crashes) == 1, out[-3000:]
    crash = crashes[0]
    summary = json.loads((waiting_run / "summary.json").read_text())
    assert list(summary["ranks"]) == ["1"] and summary["unseen"] == [0]
    assert crash["root_rank"] is None and "rank 1 failed first" not in out, crash
    # Two true stories race: rank 1's all_reduce sees its peer's socket close, or this node's torchrun agent loses
    # the c10d store (hosted by the dead node's agent) and stops rank 1 before its error is out (seen beside load)
    if crash["victims"]:
        assert crash["victims"] == [1], crash
        assert crash["text"].startswith("rank 1 failed because a peer went away ("), crash["text"]
        assert "rank 0 runs on another node, unseen here: the cause is there" in crash["text"]
        assert summary["ranks"]["1"]["outcome"].startswith("failed after an unseen peer went away"), summary["ranks"]
        assert "[crash] rank 1 failed because a peer went away" in out
    else:
        assert crash["stopped"] == [1], crash
        assert crash["text"].startswith("torchrun failed on its own (RendezvousConnectionError: "), crash["text"]
        assert crash["text"].endswith(" and stopped rank 1; rank 0 runs on another node, unseen here"), crash["text"]
        assert summary["ranks"]["1"]["outcome"] == ("stopped by the launcher after it failed "
                                                    "(RendezvousConnectionError)"), summary["ranks"]
        assert "[crash] torchrun failed on its own (RendezvousConnectionError" in out


@pytest.mark.timeout(300)
def test_the_node_hosting_the_rendezvous_dying_is_torchruns_own_failure_on_the_other(hosts, runs_dir):
    """Ranks in no collective (each computes alone) when node0 dies, and with it the c10d store its torchrun agent
    hosts: nothing fails on node1's rank, its agent loses the store and stops it. That is the root cause there."""
    runs = [runs_dir / "node0", runs_dir / "node1"]
    script = FIXTURES / "die_while_peer_works_alone.py"  # with GIVE_UP_AT=-1 no rank gives up
    procs = [_start(hosts.wrap(i, _argv(runs[i], "node0:29400", script)), _env(GIVE_UP_AT="-1")) for i in (0, 1)]
    try:
        def both_stepping() -> bool:
            return all(r.exists() and any(r.iterdir()) and "step 3 " in "".join(
                p.read_text() for p in _run_dir(r).glob("rank*.log")) for r in runs)
        wait_until(both_stepping, 240, "both nodes' ranks stepping", step=0.3, stop_if=any_exited(procs))
        _kill_tree(procs[0])  # node0: its ddptui, the torchrun agent hosting the store, its rank
        out = procs[1].communicate(timeout=180)[0]
    finally:
        for p in procs:
            if p.poll() is None:
                _kill_tree(p)
    assert procs[1].returncode == 1, out[-3000:]
    run = _run_dir(runs[1])
    (hello,) = _of(run, "rank_hello")
    rank, other = hello["rank"], 1 - hello["rank"]
    (crash,) = _of(run, "crash_verdict")
    assert crash["text"].startswith("torchrun failed on its own (RendezvousConnectionError: "), crash["text"]
    assert crash["text"].endswith(f" and stopped rank {rank}; rank {other} runs on another node, unseen here")
    assert crash["root_rank"] is None and crash["stopped"] == [rank] and crash["victims"] == []
    summary = json.loads((run / "summary.json").read_text())
    outcome = summary["ranks"][str(rank)]["outcome"]
    assert outcome == "stopped by the launcher after it failed (RendezvousConnectionError)", summary["ranks"]
    assert summary["crash"]["text"] == crash["text"] and "[crash] torchrun failed on its own" in out
