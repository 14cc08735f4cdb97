"""The environment every runner gives its ranks: injected code on PYTHONPATH, unbuffered output, knobs."""
from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path

# PLUMBING: set only so the injected code reaches the rank; the rank puts the user's values back (USER_ENV) before
# its program runs, so what the rank starts inherits the user's environment. The rank side's names are the only copy.
from ..inject.ddptui_scope import PLUMBING, REPLICA_EVERY, USER_ENV
from . import fr_env
from .profile.model import Profile

INJECT_DIR = Path(__file__).resolve().parent.parent / "inject"


def activation(wanted: Mapping[str, str], dashboard_pid: int | None = None) -> dict[str, str]:
    """ddptui's own variables and its PLUMBING, with the user's values (wanted, else inherited) saved in USER_ENV."""
    user = {k: wanted.get(k, os.environ.get(k)) for k in PLUMBING}
    prev = user["PYTHONPATH"]
    return {
        "PYTHONPATH": str(INJECT_DIR) + (os.pathsep + prev if prev else ""),
        "PYTHONUNBUFFERED": "1",
        "DDPTUI": "1",
        "DDPTUI_PID": str(dashboard_pid if dashboard_pid is not None else os.getpid()),
        USER_ENV: json.dumps(user, sort_keys=True, separators=(",", ":")),
    }


def base_env(profile: Profile, dashboard_pid: int | None = None, runner_env: Mapping[str, str] | None = None,
             run_dir: Path | str | None = None, launcher_sets_threads: bool = False) -> dict[str, str]:
    """What ddptui adds to the inherited environment of every process it starts for a profile.

    runner_env: the runner's own variables; the profile's env wins over them. launcher_sets_threads: the process is
    the user's own launcher (a wrapped torchrun command), which sets OMP_NUM_THREADS for its ranks itself, as it does
    without ddptui: none from us.
    run_dir: the run's record, for Flight Recorder's variables (fr_env.rank_env: none when the profile opts out).
    """
    env: dict[str, str] = {}
    if not launcher_sets_threads:
        # torchrun sets this to 1 itself for its ranks; direct spawns get the same so timings compare.
        env["OMP_NUM_THREADS"] = os.environ.get("OMP_NUM_THREADS", "1")
    env.update(runner_env or {})
    if run_dir is not None:
        env.update(fr_env.rank_env(profile, run_dir))
    env.update(profile.rank_env())
    env.update(activation(env, dashboard_pid))
    env[REPLICA_EVERY] = str(profile.replica_check_every)  # the live replica check's interval (0: off)
    return env


def workload_argv(profile: Profile) -> list[str]:
    """The rank program as argv (interpreter first), for runners that start the ranks themselves."""
    w = profile.workload
    if w.command:
        return list(w.command)
    if w.module:
        return [w.python, "-u", "-m", w.module, *w.args]
    assert w.script_path is not None  # a workload is a command, a module or a script (profile/workload.py)
    return [w.python, "-u", w.script_path, *w.args]


def workload_target(profile: Profile) -> list[str]:
    """The rank program as torchrun takes it after its own options (no interpreter)."""
    w = profile.workload
    if w.module:
        return ["-m", w.module, *w.args]
    assert w.script_path is not None  # a workload is a command, a module or a script (profile/workload.py)
    return [w.script_path, *w.args]
