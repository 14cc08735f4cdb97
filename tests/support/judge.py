"""The judge on a fake clock: a cpu-ddp judge begun at T0/W0, and what its ranks say at a time after it."""
from __future__ import annotations

import json
from pathlib import Path

from ddptui.runners import events as ev
from ddptui.runners.evidence import slurm_state as ss
from ddptui.runners.judge.judge import Judge
from ddptui.runners.launch.profile.load import load_profile

ROOT = Path(__file__).resolve().parents[2]
T0, W0 = 1000.0, 1_764_682_000.0  # the fake clock: monotonic and wall time at the start
PIDS = {0: 16323, 1: 16324}  # the pids of the ranks of tests/fixtures/records/crash
def make(*over: str, world: int = 2) -> Judge:
    profile = load_profile(ROOT / "profiles" / "cpu-ddp.yaml", [f"nproc={world}", *over])
    j = Judge(profile, T0, W0)
    j.begin(world, 1)
    return j


def at(j: Judge, dt: float) -> None:
    j.tick(T0 + dt, W0 + dt)


def say(j: Judge, rank, dt: float, *lines: str, stream: str = "out") -> list:
    at(j, dt)
    return j.lines(rank, stream, list(lines), W0 + dt, T0 + dt)


def hello(j: Judge, rank: int, dt: float = 0.5) -> None:
    """What the injected code says first on every rank (runners/inject/ddptui_report.py)."""
    say(j, rank, dt, "@ddptui " + json.dumps({"k": "hello", "r": rank, "pid": PIDS[rank], "host": "localhost",
                                               "world": 2}))


def of(outs, cls) -> list:
    return [o for o in outs if isinstance(o, cls)]


def texts(outs) -> list[str]:
    return [ln for o in of(outs, ev.LogLines) if o.rank is None for ln in o.lines]


# ---- the judge: the job's states -----------------------------------------------------------------------------
def job(state, reason="", nodes="", code=""):
    return ss.JobInfo("42", state, reason, nodes, code)


def hello_on(j, rank, node, dt=0.5):
    say(j, rank, dt, "@ddptui " + json.dumps({"k": "hello", "r": rank, "pid": 100 + rank, "host": "h",
                                               "world": 2, "node": node}))
