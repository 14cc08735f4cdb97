"""Which process is the rank (only it is instrumented), and the user's own environment back for what it starts."""
from __future__ import annotations

import json
import os
from collections.abc import Mapping, MutableMapping, Sequence

# The variables that switch the injected code on. A process that is not a launcher takes them out of its
# environment before the user's code runs, so nothing it starts is instrumented. DDPTUI_SOCKETS: the folder of the
# ranks' debug sockets (ddptui_fr), set when Flight Recorder is on.
# REPLICA_EVERY: optimizer steps between the live replica checks (ddptui_replica), 0 or unset: none.
REPLICA_EVERY = "DDPTUI_REPLICA_EVERY"
ACTIVATION = ("DDPTUI", "DDPTUI_PID", "DDPTUI_XLA", "DDPTUI_USER_ENV", "DDPTUI_SOCKETS", REPLICA_EVERY)
# JSON {name: the user's value or null} of every variable ddptui set only to reach the rank (PLUMBING).
USER_ENV = "DDPTUI_USER_ENV"
PLUMBING = ("PYTHONPATH", "PYTHONUNBUFFERED")
INJECT_DIR = os.path.dirname(os.path.realpath(__file__))

# torchrun's agent may inherit RANK (mirage exports it per node): it is still a launcher, not a rank.
_LAUNCHER_MODULES = ("torch.distributed.run", "torch.distributed.launch")
# multiprocessing's own server processes: never a rank, whoever started them.
_MP_HELPERS = ("multiprocessing.resource_tracker", "multiprocessing.forkserver")

OFF, LAUNCHER, RANK, HELPER = "off", "launcher", "rank", "helper"
# A task of an srun step is a rank even when nothing set torch's variables (a script that reads SLURM_PROCID):
# Slurm's names for them. A batch script has SLURM_PROCID too, but no SLURM_STEP_ID: it is no rank.
_SLURM_TASK_VARS = {"RANK": "SLURM_PROCID", "WORLD_SIZE": "SLURM_NTASKS", "LOCAL_RANK": "SLURM_LOCALID"}


def launcher_var(environ: Mapping[str, str], name: str) -> str | None:
    """RANK, WORLD_SIZE or LOCAL_RANK as the launcher gave it: torch's variable, else Slurm's in an srun task."""
    value = environ.get(name)
    if value is None and name in _SLURM_TASK_VARS and environ.get("SLURM_STEP_ID") is not None:
        value = environ.get(_SLURM_TASK_VARS[name])
    return value
# In a rank: the values ddptui gave the variables the rank took out of os.environ (DDPTUI_PID, ...), for
# injected code that needs them later. Set by sitecustomize.
GIVEN: dict[str, str | None] = {}


def role(environ: Mapping[str, str], argv: Sequence[str], orig_argv: Sequence[str]) -> str:
    """off: not asked; launcher: passes the activation on, uninstrumented; rank: instrument it; helper: drop it.

    The rank is the process a launcher started as one: torchrun's child or our env:// spawn (RANK set), a task
    of an srun step (SLURM_PROCID), or the
    XLA program and its torch_xla.launch worker (DDPTUI_XLA=1). Anything a rank starts never sees the activation
    (the rank removes it), so a process that sees it without RANK stands between ddptui and the ranks: a
    torchrun agent, or a wrapper (a Python stand-in for mirage, a user's launch script) that must pass it on.
    """
    if environ.get("DDPTUI") != "1":
        return OFF
    prog = os.path.basename(argv[0]) if argv else ""
    if prog == "torchrun" or any(m in orig_argv for m in _LAUNCHER_MODULES):
        return LAUNCHER
    if any(h in arg for arg in orig_argv for h in _MP_HELPERS):
        return HELPER
    if launcher_var(environ, "RANK") is not None or environ.get("DDPTUI_XLA") == "1":
        return RANK
    return LAUNCHER


def user_env(environ: Mapping[str, str]) -> dict[str, str | None]:
    """The changes that give the user's environment back: name -> value, None to unset."""
    changes: dict[str, str | None] = {name: None for name in ACTIVATION}
    saved = _saved(environ.get(USER_ENV))
    if saved is not None:
        changes.update(saved)
    elif environ.get("PYTHONPATH") is not None:
        # Activated by hand, no saved copy: at least take our folder off the path children inherit.
        rest = [p for p in environ["PYTHONPATH"].split(os.pathsep) if p and not _is_inject_dir(p)]
        changes["PYTHONPATH"] = os.pathsep.join(rest) if rest else None
    return {k: v for k, v in changes.items() if environ.get(k) != v}


def apply(changes: Mapping[str, str | None], environ: MutableMapping[str, str]) -> dict[str, str | None]:
    """Apply changes to environ; returns what they replaced (same shape), to undo them."""
    before = {k: environ.get(k) for k in changes}
    for k, v in changes.items():
        if v is None:
            environ.pop(k, None)
        else:
            environ[k] = v
    return before


def _saved(text: str | None) -> dict[str, str | None] | None:
    if not text:
        return None
    try:
        data = json.loads(text)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    return {str(k): v for k, v in data.items() if v is None or isinstance(v, str)}


def _is_inject_dir(entry: str) -> bool:
    try:
        return os.path.realpath(entry) == INJECT_DIR
    except (OSError, ValueError):
        return False
