"""Whether a rank runs on this machine: the one test before a pid is watched, sampled, signalled or ptraced here."""
from __future__ import annotations

import socket

from .srun_exec import is_local


def this_host() -> str:
    return socket.gethostname()


def on_this_host(host: str) -> bool:
    """A rank whose hello gave `host` (none yet: local) runs here: its pid is a process of this machine."""
    return is_local(host, socket.gethostname())


def pids_here(pids: set[int], tracks) -> set[int]:
    """The pids of ranks on this machine: a pid another node's rank said is no process here (never watched, never
    signalled; such a rank's end comes from its launcher or job)."""
    away = {t.pid for t in tracks.values() if t.pid and not on_this_host(t.host)}
    return pids - away
