"""The dashboard while a Slurm job runs: pending in the header, ranks regrouped by node as their hellos arrive, a lost
node as a banner."""
from __future__ import annotations

import pytest
from textual.containers import Grid

from ddptui.runners import events as ev
from ddptui.tui.app import DdpApp
from ddptui.tui.widgets.banner import Banner
from ddptui.tui.widgets.rank_pane import RankPane
from tests.support.ui import SIZE, GatedSource, aio, until
from tests.support.scenes import multinode_scenario

pytestmark = pytest.mark.any_python


def stages():
    """The cyclic 2 x 2 job of multinode_scenario, released batch by batch as the engine would send it."""
    pending, running, *steps, lost = multinode_scenario(cyclic=True, lost=True)
    return [lambda t: pending, lambda t: running + [e for b in steps for e in b], lambda t: lost]


def grid_order(app) -> list[int]:
    return [p.rank for p in app.screen.query_one("#rank-grid", Grid).children]


@pytest.mark.timeout(60)
@aio
async def test_panes_regroup_by_node_when_the_hellos_arrive_and_a_lost_node_is_a_banner():
    src = GatedSource(stages())
    app = DdpApp(source=src)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.drawn and app.model.job is not None, 20, "the pending job")
        head = str(app.screen.query_one("#run-head").render())
        assert "pending · job 12 PENDING (Priority)" in head
        assert grid_order(app) == [0, 1, 2, 3]  # nobody placed yet: rank order
        src.release(1)
        await until(pilot, lambda: app.drawn and app.model.rank(3).node == "node1", 20, "the hellos")
        await until(pilot, lambda: grid_order(app) == [0, 2, 1, 3], 10, "node0's ranks, then node1's")
        grid = app.screen.query_one("#rank-grid", Grid)
        assert grid.styles.grid_size_columns == 2  # a row per node
        panes = {p.rank: p for p in app.screen.query(RankPane)}
        assert [r for r, p in sorted(panes.items()) if p.has_class("-node-alt")] == [1, 3]
        assert str(panes[2].border_title) == "rank 2 · pid 7002 · node0"
        assert "PENDING" not in str(app.screen.query_one("#run-head").render())
        assert not app.screen.query_one(Banner).display
        src.release(2)
        await until(pilot, lambda: app.drawn and app.model.lost, 20, "the lost node")
        banner = app.screen.query_one(Banner)
        assert banner.display and banner.has_class("-crash")
        assert banner.state[1] == "NODE LOST node1 (ranks 1,3): the srun task on node1 exited (node unreachable)"
        await pilot.press("3", "z")  # the zoomed rank says where it runs too
        await until(pilot, lambda: app.screen.query("#zoom-head"), 10, "the zoom screen")
        assert "rank 3 · ✗ failed (node lost) · pid 7003 · node1 · " in str(app.screen.query_one("#zoom-head").render())
