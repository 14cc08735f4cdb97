"""A real run says where each rank ran: summary.json's per-rank rows (host, node, pid), the console's summary and the
record replayed."""
from __future__ import annotations

import io
import json
import socket

import pytest

from ddptui.runners import events as ev
from ddptui.runners.judge.judge import EXIT_OK
from ddptui.runners.edge.record import replay_events
from ddptui.tui.console import Console

pytestmark = pytest.mark.main_suite(
    "long end-to-end rank runs (the engine and dashboard under them are in the any_python set)")


@pytest.mark.timeout(120)
def test_a_real_run_records_each_ranks_node_and_pid(shared_run):
    code, rec, session = shared_run("cpu-smoke")
    assert code == EXIT_OK
    host = socket.gethostname()
    hellos = {h.rank: h for h in rec.of(ev.RankHello)}
    assert sorted(hellos) == [0, 1] and all(h.node == h.host == host for h in hellos.values())  # one machine
    rows = json.loads((session.run_dir / "summary.json").read_text())["ranks"]
    assert {r: (row["host"], row["node"], row["pid"]) for r, row in rows.items()} == {
        str(r): (host, host, hellos[r].pid) for r in (0, 1)}
    text = Console(io.StringIO(), color=False).render_summary(rec.one(ev.RunFinished))
    for r in (0, 1):
        assert any(ln.split()[:3] == [str(r), host, str(hellos[r].pid)] for ln in text.splitlines()), text
    replayed = {h.rank: h for h in replay_events(session.run_dir) if isinstance(h, ev.RankHello)}
    assert replayed == hellos


@pytest.mark.timeout(120)
def test_emulated_nodes_of_the_env_runner_are_named_like_torchruns(shared_run):
    """multinode-env: 2 emulated nodes x 1 rank, ddptui starts each rank with the launcher's variables torchrun gives
    (GROUP_RANK, GROUP_WORLD_SIZE): rank r says node r."""
    code, rec, session = shared_run("multinode-env", ["steps=5"])
    assert code == EXIT_OK
    assert sorted((h.rank, h.node) for h in rec.of(ev.RankHello)) == [(0, "node0"), (1, "node1")]
    rows = json.loads((session.run_dir / "summary.json").read_text())["ranks"]
    assert [rows[r]["node"] for r in "01"] == ["node0", "node1"]
