"""A machine held at several times its cores for the length of a test: busy loops, and lanes that keep starting Python
and importing torch (the load a test suite makes), each in its own session, all ended when the test ends."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

IMPORTER = "while :; do \"$0\" -c 'import torch' >/dev/null 2>&1; done"
BUSY = "while :; do :; done"


def cores() -> int:
    return len(os.sched_getaffinity(0))


class Load:
    """`busy` busy loops and `importers` lanes of `python -c 'import torch'`, each its own session: the kernel groups a
    session's processes for the scheduler (autogroup), and the ranks each run in a session of their own, so a loop
    that shares one session with the others would weigh as one process. `python`: the importers' interpreter."""

    def __init__(self, busy: int, importers: int = 0, python: str | Path = sys.executable, lifetime: int = 600,
                 token: bool = True) -> None:
        self.busy, self.importers, self.python, self.lifetime, self.token = busy, importers, str(python), lifetime, token
        self.procs: list[subprocess.Popen] = []

    def __enter__(self) -> "Load":
        """Start every lane; each ends by itself after `lifetime` seconds (`timeout -s KILL`) should its owner never
        stop it. token=False: the lanes do not carry the test session's token (a module's load outlives its tests)."""
        env = dict(os.environ)
        if not self.token:
            env.pop("DDPTUI_TEST_TOKEN", None)
        for cmd in [BUSY] * self.busy + [IMPORTER] * self.importers:
            self.procs.append(subprocess.Popen(["timeout", "-s", "KILL", str(self.lifetime), "sh", "-c", cmd,
                                                self.python], start_new_session=True, env=env,
                                               stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                               stderr=subprocess.DEVNULL))
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> None:
        """SIGKILL every lane's whole session group (an importer's python with it), then reap them."""
        for p in self.procs:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for p in self.procs:
            p.wait(timeout=10)
        self.procs.clear()
