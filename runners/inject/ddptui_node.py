"""The node a rank runs on, as its launcher names it: one spelling for the rank's hello and for `ddptui attach`."""
from __future__ import annotations

import os
import socket
from typing import Any


def node_name(env: Any = None, host: str | None = None) -> str:
    """The node this rank runs on as its launcher names it: Slurm's node name, else torchrun's node (group) rank
    when the job has several nodes, else the host name."""
    env = os.environ if env is None else env
    host = socket.gethostname() if host is None else host
    slurm = (env.get("SLURMD_NODENAME") or "").strip()
    if slurm:
        return slurm
    try:
        if int(env.get("GROUP_WORLD_SIZE", "")) > 1:
            return f"node{int(env['GROUP_RANK']):d}"
    except (KeyError, ValueError):
        pass
    return host
