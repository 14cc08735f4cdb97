"""The headless console says where each rank ran (node, pid), the batch job's state as it changes, and a node lost."""
from __future__ import annotations

import pytest

import io

from ddptui.runners import events as ev
from ddptui.tui.console import Console

pytestmark = pytest.mark.any_python


def _finished(ranks: dict) -> ev.RunFinished:
    s = {"profile": "slurm-ddp", "runner": "slurm", "world_size": len(ranks), "duration_s": 9.0, "status": "ok",
         "ranks": ranks, "run_dir": "/runs/x"}
    return ev.RunFinished("ok", 0, "/runs/x/summary.json", 10.0, s)


def _row(**kw) -> dict:
    return {"status": "exited", "returncode": 0, "steps": 20, "first_loss": 1.0, "last_loss": 0.5, **kw}


def test_summary_rows_say_the_node_and_pid_of_every_rank():
    text = Console(io.StringIO(), color=False).render_summary(_finished({
        "0": _row(pid=7000, host="cn-a.cluster", node="node0"), "1": _row(pid=123456, host="cn-b", node="node1")}))
    head, r0, r1 = text.splitlines()[2:5]
    assert head.split()[:4] == ["rank", "node", "pid", "status"]
    assert r0.split()[:4] == ["0", "node0", "7000", "exited"] and r1.split()[:4] == ["1", "node1", "123456", "exited"]
    assert head.index("status") == r0.index("exited") == r1.index("exited")  # columns line up


def test_summary_of_an_old_record_says_the_host_or_nothing():
    text = Console(io.StringIO(), color=False).render_summary(_finished({
        "0": _row(pid=41), "1": _row(pid=None, host="box")}))
    rows = text.splitlines()[3:5]
    assert rows[0].split()[:4] == ["0", "-", "41", "exited"] and rows[1].split()[:4] == ["1", "box", "-", "exited"]


def test_job_state_changes_and_a_lost_node_are_one_line_each():
    out = io.StringIO()
    Console(out, color=False).handle([
        ev.JobState("12", "PENDING", "Priority", (), 1.0),
        ev.JobState("12", "RUNNING", "", ("node0", "node1"), 2.0),
        ev.NodeLost("node1", (2, 3), "the srun task on node1 exited", 3.0),
        ev.NodeLost("node2", (), "srun could not reach node2 for stacks (timed out)", 3.5),
        ev.JobState("12", "CANCELLED", "", ("node0", "node1"), 4.0),
    ])
    lines = out.getvalue().splitlines()
    assert [ln.split("] ", 1)[1] for ln in lines] == [
        "[ddptui] slurm job 12 PENDING (Priority)",
        "[ddptui] slurm job 12 RUNNING on node0,node1",
        "[node lost] node1 (ranks 2, 3): the srun task on node1 exited",
        "[node lost] node2 (no ranks): srun could not reach node2 for stacks (timed out)",
        "[ddptui] slurm job 12 CANCELLED on node0,node1",
    ]


def test_summary_says_how_the_job_ended_and_which_node_was_lost():
    done = _finished({"0": _row(pid=1, node="node0"), "1": _row(pid=2, node="node1")})
    done.summary.update(job={"id": "12", "state": "CANCELLED", "reason": "", "exit_code": 0, "nodes": ["node0", "node1"],
                             "cancelled_by_ddptui": True, "end": "CANCELLED"},
                        nodes_lost={"node1": {"ranks": [1], "why": "the srun task on node1 exited", "wall": 5.0}})
    text = Console(io.StringIO(), color=False).render_summary(done)
    assert "\nslurm job 12: CANCELLED (cancelled by ddptui)\nnode lost: node1 (rank 1): the srun task on node1 exited\n" \
        in text
    assert "slurm job" not in Console(io.StringIO(), color=False).render_summary(_finished({"0": _row()}))
