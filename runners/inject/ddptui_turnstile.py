"""The ordinal-ordered turnstile that keeps PJRT CPU thread replicas from compiling twin executables and deadlocking.

Replicas that miss the compile cache at the same moment compile twin executables whose collectives wait on
different rendezvous keys, and the first all-reduce deadlocks (docs/xla.md). Run in ordinal order, replica N
reuses what replica 0 compiled. Used by ddptui_xla (every step marker of an unmodified script) and by the
built-in XLA workloads (their own syncs, when they run outside ddptui). Standard library only.
"""
from __future__ import annotations

import contextlib
import threading


class Turnstile:
    """Replica N's k-th turn starts after every lower replica finished its k-th turn, or left."""

    def __init__(self):
        self.cond = threading.Condition()
        self.done: dict[int, int] = {}  # ordinal -> turns finished
        self.gone: set[int] = set()  # ordinals that left (returned or raised): they never block the others

    def before(self, n: int) -> None:
        """Wait for replica n's turn. Every lower ordinal is checked, not only n-1: one that left no longer blocks."""
        with self.cond:
            self.done.setdefault(n, 0)
            self.cond.wait_for(lambda: all(self.done.get(j, 0) > self.done[n] or j in self.gone for j in range(n)))

    def after(self, n: int) -> None:
        """Replica n finished its turn."""
        with self.cond:
            self.done[n] = self.done.get(n, 0) + 1
            self.cond.notify_all()

    def leave(self, n: int) -> None:
        """Replica n takes no more turns."""
        with self.cond:
            self.gone.add(n)
            self.cond.notify_all()

    @contextlib.contextmanager
    def turn(self, n: int):
        """`with turnstile.turn(n): torch_xla.sync()`: the body runs in ordinal order, and the turn ends even if it raised."""
        self.before(n)
        try:
            yield
        finally:
            self.after(n)
