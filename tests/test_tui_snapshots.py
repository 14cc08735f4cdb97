"""SVG snapshots of the main screens, made deterministic by replaying committed run records at a fixed size."""
from __future__ import annotations


import pytest

import ddptui.tui.screens.picker as picker
from ddptui.tui.app import DdpApp
from ddptui.tui.replay import ReplaySource
from tests.support.replay import PROFILES, replay_app, replayed

SIZE = (160, 50)
pytestmark = [pytest.mark.any_python, pytest.mark.usefixtures("utc")]  # tests/conftest.py: the records' zone


@pytest.mark.timeout(60)
def test_snapshot_picker(snap_compare, monkeypatch):
    fixed = [PROFILES / f"{n}.yaml" for n in ("cpu-ddp", "crash", "hang")]
    monkeypatch.setattr(picker, "find_profiles", lambda extra=None: fixed)
    assert snap_compare(DdpApp(), terminal_size=SIZE, press=["down", "down"])


@pytest.mark.timeout(60)
def test_snapshot_running_run(snap_compare):
    assert snap_compare(replay_app("cpu-ddp", until=8.90), terminal_size=SIZE, run_before=replayed)


@pytest.mark.timeout(60)
def test_snapshot_stall_view(snap_compare):
    assert snap_compare(replay_app("hang"), terminal_size=SIZE, run_before=replayed)


@pytest.mark.timeout(60)
def test_snapshot_final_verdict(snap_compare):
    assert snap_compare(replay_app("cpu-ddp"), terminal_size=SIZE, run_before=replayed)


@pytest.mark.timeout(60)
def test_snapshot_crash_panel(snap_compare):
    assert snap_compare(replay_app("crash"), terminal_size=SIZE, run_before=replayed)


def held_app(batches) -> DdpApp:
    """A live run that emitted these batches and goes on (a Slurm job as the engine reports it)."""
    from tests.support.ui import ScriptSource
    return DdpApp(source=ScriptSource(batches, kind="live", hold=True))


async def held(pilot) -> None:
    from tests.support.ui import settle, steady
    await settle(pilot, pilot.app)
    await steady(pilot)


@pytest.mark.timeout(60)
def test_snapshot_slurm_job_pending(snap_compare):
    from tests.support.scenes import multinode_scenario
    assert snap_compare(held_app(multinode_scenario(pending_only=True)), terminal_size=SIZE, run_before=held)


@pytest.mark.timeout(60)
def test_snapshot_two_nodes_grouped_and_one_lost(snap_compare):
    """2 nodes x 2 ranks placed cyclically (rank r on node r % 2): the grid shows node0's ranks 0, 2 then node1's."""
    from tests.support.scenes import multinode_scenario
    assert snap_compare(held_app(multinode_scenario(cyclic=True, lost=True)), terminal_size=SIZE, run_before=held)


@pytest.mark.timeout(60)
def test_snapshot_eight_nodes(snap_compare):
    from tests.support.scenes import multinode_scenario
    assert snap_compare(held_app(multinode_scenario(nodes=8, per=2)), terminal_size=SIZE, run_before=held)


@pytest.mark.timeout(60)
def test_snapshot_collectives_laggard(snap_compare):
    """2 nodes x 2 ranks, a subgroup of the even ranks; rank 3 has not entered the all_reduce #57 the others wait in."""
    from tests.support.collectives_scene import behind_batch, collectives_scenario

    async def collectives_tab(pilot) -> None:
        from tests.support.ui import steady, until
        from ddptui.tui.widgets.collectives_view import CollRow
        await held(pilot)
        await pilot.press("o")
        await until(pilot, lambda: any(w.has_class("-behind") for w in pilot.app.screen.query(CollRow)), 10,
                    "the laggard's row")
        await steady(pilot)

    app = held_app(collectives_scenario() + [behind_batch()])
    assert snap_compare(app, terminal_size=SIZE, run_before=collectives_tab)
