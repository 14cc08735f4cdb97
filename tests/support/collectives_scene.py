"""The Collectives tab's scene: 2 nodes x 2 ranks whose collectives are healthy, then rank 3 falls behind."""
from __future__ import annotations

from ddptui.runners.evidence import collectives as co
from ddptui.runners import events as ev


T0 = 1_764_682_000.0


ALL = "[0, 1, 2, 3]"


def g(enq: int, comp: int, frontier=None, ranks=ALL, desc="") -> dict:
    """A group as the engine sends it (runners/collectives.entry: ints, members as a list)."""
    return co.entry({"desc": desc, "ranks": ranks, "enqueued": enq, "completed": comp, "frontier": frontier})


AR57 = {"seq": 57, "op": "all_reduce", "sizes": [[1024]], "dtypes": ["Float"]}


def healthy() -> dict:
    return {r: {"0": g(56, 56), **({"1": g(9, 9, ranks="[0, 2]", desc="evens")} if r % 2 == 0 else {})}
            for r in range(4)}


def rank3_behind() -> dict:
    """Ranks 0-2 wait in all_reduce #57 (pending across two looks: a frontier), rank 3 has not enqueued it."""
    return {r: {"0": g(57, 56, AR57)} for r in (0, 1, 2)}


def collectives_scenario() -> list[list[ev.Event]]:
    """2 nodes x 2 ranks training; their collectives healthy, then rank 3 (node1) falls behind in the default group."""
    b = [[ev.RunStarted("/runs/x-coll", "cpu-ddp", "torchrun", 4, 100, T0)]
         + [ev.RankHello(r, 7000 + r, f"node{r // 2}", 4, T0 + 1, node=f"node{r // 2}") for r in range(4)]
         + [ev.RankState(r, "running", "", T0 + 1) for r in range(4)]]
    b.append([ev.Progress(r, 5, None, T0 + 2, "hook") for r in range(4)]
             + [ev.CollectiveProgress(healthy(), co.laggards(healthy()), T0 + 2)])
    return b


def behind_batch() -> list[ev.Event]:
    grid = healthy()
    for r, groups in rank3_behind().items():
        grid[r] = {**grid[r], **groups}
    changed = {r: grid[r] for r in (0, 1, 2)}
    assert co.laggards(grid) == (3,)  # what the engine decides from the same numbers
    return [ev.CollectiveProgress(changed, (3,), T0 + 6)]
