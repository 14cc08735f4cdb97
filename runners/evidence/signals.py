"""Signals by name: which one ended a process (from its negative return code) or a launcher's log names by number."""
from __future__ import annotations

import signal


def signame(n: int) -> str:
    """'SIGTERM' for 15; 'signal 99' for a number no signal has."""
    try:
        return signal.Signals(n).name
    except ValueError:
        return f"signal {n}"


def signal_name(returncode: int | None) -> str | None:
    """The signal that ended a process, from its return code (-15 -> 'SIGTERM'); None when it exited by itself."""
    if returncode is None or returncode >= 0:
        return None
    return signame(-returncode)
