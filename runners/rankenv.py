"""The environment every runner gives its ranks: injected code on PYTHONPATH, unbuffered output, knobs."""
from __future__ import annotations

import os
from pathlib import Path

INJECT_DIR = Path(__file__).resolve().parent / "inject"
WORKLOADS_DIR = Path(__file__).resolve().parent / "workloads"


def base_env(profile, dashboard_pid: int | None = None) -> dict[str, str]:
    """What ddptui adds to the inherited environment of every process it starts for a profile."""
    prev = os.environ.get("PYTHONPATH", "")
    env = {
        "PYTHONPATH": str(INJECT_DIR) + (os.pathsep + prev if prev else ""),
        "PYTHONUNBUFFERED": "1",
        "DDPTUI": "1",
        "DDPTUI_PID": str(dashboard_pid if dashboard_pid is not None else os.getpid()),
        # torchrun sets this to 1 itself for its ranks; direct spawns get the same so timings compare.
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
    }
    env.update(profile.rank_env())
    return env


def workload_argv(profile) -> list[str]:
    """The rank program as argv (interpreter first), for runners that start the ranks themselves."""
    w = profile.workload
    if w.command:
        return list(w.command)
    if w.module:
        return [w.python, "-u", "-m", w.module, *w.args]
    return [w.python, "-u", w.script_path, *w.args]


def workload_target(profile) -> list[str]:
    """The rank program as torchrun takes it after its own options (no interpreter)."""
    w = profile.workload
    if w.module:
        return ["-m", w.module, *w.args]
    return [w.script_path, *w.args]
