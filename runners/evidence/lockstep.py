"""How many steps a job's ranks can be apart at all: ranks that share a collective every step cannot drift apart."""
from __future__ import annotations

import math

LOCKSTEP = 2  # ranks that share a collective every step: one may count its step while another still finishes its own


def step_bound(tracks, first_digests: dict) -> int | None:
    """The most steps the live ranks can be apart, or None when nothing known ties them together.

    A rank whose optimizer updates a DistributedDataParallel model (its first-step digests are named by it, source
    `ddp`) all-reduces its gradients in every step's backward: no rank finishes step n+1 before every other one has
    entered step n+1's all-reduce. Where the ranks' Flight Recorder numbers (`coll` reports, runners/evidence/collectives.py)
    show a group every live rank is in and whose collectives each rank enqueues once every k steps or more often, no
    rank gets more than k + 1 steps ahead. A count gap within the bound is how the counts were read, not a straggler."""
    live = [t for t in tracks if t.alive and t.step is not None]
    if len(live) < 2:
        return None
    if all(first_digests.get(t.rank, ((), ""))[1] == "ddp" for t in live):
        return LOCKSTEP
    return _coll_bound(live)


def _coll_bound(live) -> int | None:
    groups = set.intersection(*(set(t.coll_marks[-1][1]) if t.coll_marks else set() for t in live))
    best = None
    for pg in groups:
        every = 0.0  # the most steps between two of the group's collectives, over the ranks
        for t in live:
            marks = [(s, e[pg]) for s, e in t.coll_marks if pg in e]
            if len(marks) < 2:
                break
            (s0, e0), (s1, e1) = marks[0], marks[-1]
            if s1 <= s0 or e1 <= e0:
                break
            every = max(every, (s1 - s0) / (e1 - e0))
        else:
            bound = max(LOCKSTEP, math.ceil(every) + 1)
            best = bound if best is None else min(best, bound)
    return best
