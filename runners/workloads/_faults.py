"""DDP_FAULT=kind:rank:step[:seconds] fault injection shared by the built-in workloads.

The one home of the fault kinds, their default seconds and the DDP_FAULT format: the ranks run this file (under
any interpreter, without ddptui installed, so it imports nothing of ddptui) and the profile loader reads it too.
"""
from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from typing import NamedTuple

# seconds: for hang how long to sleep, for slow the delay of every step; crash and diverge take none
DEFAULT_SECONDS = {"hang": 3600.0, "crash": 0.0, "diverge": 0.0, "slow": 0.2}
KINDS = tuple(DEFAULT_SECONDS)


class DdpFault(NamedTuple):
    """The DDP_FAULT value as a rank reads it (the profile's `fault:` section is launch.profile.Fault)."""

    kind: str
    rank: int
    step: int
    seconds: float


def spec(kind: str, rank: int, step: int, seconds: float) -> str:
    """The DDP_FAULT value that parse() reads back: kind:rank:step:seconds."""
    secs = str(int(seconds)) if float(seconds).is_integer() else repr(float(seconds))
    return f"{kind}:{rank}:{step}:{secs}"


def parse(text: str) -> DdpFault:
    parts = text.strip().split(":")
    if len(parts) not in (3, 4) or parts[0] not in KINDS:
        raise ValueError("expected kind:rank:step[:seconds] with kind in " + "|".join(KINDS))
    kind = parts[0]
    rank, step = int(parts[1]), int(parts[2])
    if rank < 0 or step < 0:
        raise ValueError("rank and step must be >= 0")
    seconds = DEFAULT_SECONDS[kind]
    if len(parts) == 4 and parts[3].strip():
        seconds = float(parts[3])
        if not seconds >= 0:
            raise ValueError("seconds must be >= 0")
    return DdpFault(kind, rank, step, seconds)


def from_env(rank: int) -> DdpFault | None:
    """The fault aimed at any rank, or None; a malformed DDP_FAULT ends the program with exit 4."""
    text = os.environ.get("DDP_FAULT", "").strip()
    if not text:
        return None
    try:
        return parse(text)
    except ValueError as e:
        sys.stderr.write(f"[rank {rank}] bad DDP_FAULT={text!r}: {e}\n")
        sys.stderr.flush()
        sys.exit(4)


class Injector:
    """Applies one fault on its rank; every call is a no-op on the other ranks."""

    def __init__(self, fault: DdpFault | None, rank: int, log: Callable[[str], None]):
        self.fault = fault if fault is not None and fault.rank == rank else None
        self.rank, self.log = rank, log
        self._slow_said = False

    def at_step(self, step: int) -> None:
        """Call once per step, after the forward and before the backward / collective.

        `step` counts the steps already completed: a hang at step 2 strikes during the third step.
        """
        f = self.fault
        if f is None:
            return
        if f.kind == "hang" and step == f.step:
            self.log(f"injecting hang at step {step}")
            time.sleep(f.seconds)
        elif f.kind == "crash" and step == f.step:
            raise RuntimeError(f"injected crash on rank {self.rank} at step {step}")
        elif f.kind == "slow" and step >= f.step:
            if not self._slow_said:
                self._slow_said = True
                self.log(f"injecting slowness ({f.seconds} s per step) from step {step}")
            time.sleep(f.seconds)

    def wants_diverge(self) -> bool:
        return self.fault is not None and self.fault.kind == "diverge"

    def diverge(self, model) -> None:
        """After the last step: perturb this rank's first parameter so the replicas differ."""
        if not self.wants_diverge():
            return
        import torch

        with torch.no_grad():
            first = next(iter(model.parameters()))
            first.add_(1e-3)
        self.log("injecting divergence: perturbed the first parameter after the last step")
