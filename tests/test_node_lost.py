"""A node lost in a real two-agent torchrun run: its agent dies while the other node trains on. The engine says which
node and which ranks, tears the run down through the agents' own process groups and exits 1."""
from __future__ import annotations

import json
import os
import signal
import threading
from pathlib import Path

import pytest

from ddptui.runners import events as ev
from tests.support.wait import wait_until

pytestmark = pytest.mark.main_suite(
    "long end-to-end rank runs (the engine and dashboard under them are in the any_python set)")

FIXTURES = Path(__file__).resolve().parent / "fixtures"


def two_agents(tmp_path: Path, script: str) -> Path:
    prof = tmp_path / "two-agents.yaml"
    prof.write_text(f"name: two-agents\nrunner: torchrun\nnproc: 1\nnnodes: 2\nreplica_check: false\n"
                    f"workload:\n  script: {FIXTURES / script}\n")
    return prof


@pytest.mark.timeout(120)
def test_an_agent_killed_while_the_other_node_trains_is_a_node_lost(tmp_path, runs_dir):
    seen: list = []
    killed: dict = {}

    def emit(batch):
        seen.extend(batch)

    def kill_node1():
        def both_training():
            ranks = {e.rank for e in list(seen) if isinstance(e, ev.Progress) and (e.step or 0) >= 3}
            return ranks >= {0, 1}
        wait_until(both_training, 90, "both nodes training")
        pid = next(e.pid for e in list(seen) if isinstance(e, ev.ProcessStarted) and e.name == "torchrun-node1")
        killed["pid"] = pid
        os.kill(pid, signal.SIGKILL)  # the node is gone: its agent with it (its rank trains on, orphaned)

    t = threading.Thread(target=kill_node1, daemon=True)
    t.start()
    from ddptui.runners.launch.profile.load import load_profile
    from ddptui.runners.session import Session
    session = Session(load_profile(two_agents(tmp_path, "train_ddp_long.py")), runs_dir, emit=emit)
    code = session.run()
    t.join(5)
    assert killed, "the test never killed node1's agent"
    lost = [e for e in seen if isinstance(e, ev.NodeLost)]
    assert [(e.node, e.ranks) for e in lost] == [("node1", (1,))], lost
    assert "SIGKILL" in lost[0].why
    assert code == 1
    s = json.loads((session.run_dir / "summary.json").read_text())
    assert s["status"] == "failed" and list(s["nodes_lost"]) == ["node1"]
    assert s["crash"]["text"].startswith("node node1 lost"), s["crash"]["text"]


def test_a_pid_said_by_a_rank_on_another_host_is_never_watched_or_signalled(tmp_path, runs_dir):
    """A rank on another node says its pid there; the same number here is some other process (here: this test's own
    sleeping child). ddptui must neither take its death for the rank's nor signal it."""
    import subprocess
    import sys

    from ddptui.runners.launch.profile.load import load_profile
    from ddptui.runners.session import Session

    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        session = Session(load_profile(two_agents(tmp_path, "train_ddp_long.py")), runs_dir)
        session.judge.begin(2, 2)
        session.judge.lines(1, "out", ['@ddptui {"k": "hello", "r": 1, "pid": %d, "host": "elsewhere-node",'
                                       ' "world": 2, "node": "node1"}' % bystander.pid], 0.0, 0.0)
        session.judge.lines(0, "out", ['@ddptui {"k": "hello", "r": 0, "pid": %d, "host": "%s", "world": 2}'
                                       % (os.getpid(), os.uname().nodename)], 0.0, 0.0)
        assert session._here(session.judge.rank_pids()) == {os.getpid()}
        assert session._here(session.judge.watched_pids()) == {os.getpid()}
        bystander.kill()  # gone here: not the remote rank's death
        bystander.wait()
        session._check_rank_pids()
        assert session.tracks[1].alive and session.tracks[1].exit_wall is None
    finally:
        if bystander.poll() is None:
            bystander.kill()
            bystander.wait()
        session._deaths.close()
        session.record.close()


@pytest.mark.timeout(150)
def test_an_agent_that_never_exits_after_a_failure_is_torn_down_by_the_watchdog(tmp_path, runs_dir):
    """Node1 freezes (its agent SIGSTOPped: it will never exit by itself, as an agent did after a partition in the
    lab) and its rank dies; node0's rank fails on the lost peer. The watchdog tears the frozen agent down."""
    from ddptui.runners.judge.job_follow import AGENT_EXIT_GRACE
    from ddptui.runners.launch.profile.load import load_profile
    from ddptui.runners.session import Session

    seen: list = []
    done: dict = {}

    def freeze_node1():
        def both_training():
            return {e.rank for e in list(seen) if isinstance(e, ev.Progress) and (e.step or 0) >= 3} >= {0, 1}
        wait_until(both_training, 90, "both nodes training")
        agent = next(e.pid for e in list(seen) if isinstance(e, ev.ProcessStarted) and e.name == "torchrun-node1")
        rank1 = next(e.pid for e in list(seen) if isinstance(e, ev.RankHello) and e.rank == 1)
        os.kill(agent, signal.SIGSTOP)
        os.kill(rank1, signal.SIGKILL)
        done["at"] = __import__("time").monotonic()

    t = threading.Thread(target=freeze_node1, daemon=True)
    t.start()
    session = Session(load_profile(two_agents(tmp_path, "train_ddp_long.py")), runs_dir, emit=seen.extend)
    code = session.run()
    t.join(5)
    took = __import__("time").monotonic() - done["at"]
    assert code == 1
    lost = [e for e in seen if isinstance(e, ev.NodeLost)]
    assert [e.node for e in lost] == ["node1"] and "did not exit" in lost[0].why, lost
    assert AGENT_EXIT_GRACE < took < AGENT_EXIT_GRACE + 30, took
    s = json.loads((session.run_dir / "summary.json").read_text())
    assert s["crash"]["root_rank"] == 1, s["crash"]
