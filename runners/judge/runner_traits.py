"""What the judge must know of the runner that started the ranks: each runner declares its own (runners/launch/runner.py)."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RunnerTraits:
    """The default: ranks that are processes of their own, as torchrun's, env://'s and Slurm's (and an attached job's)."""

    # the ranks are torch_xla replicas (on PJRT CPU, threads of one worker): XLA's rendezvous warnings are the record
    # (no Flight Recorder), each replica's stack is its own thread's, nothing broadcast the first weights
    xla_replicas: bool = False
    in_process: bool = False  # the ranks run inside the launcher's own process (mirage --in-process)
    quiet_hints: frozenset[str] = frozenset()  # hints whose recipe the runner already applied: not raised
    stall_hint: tuple[str, str] | None = None  # (code, line) of a hint raised when several ranks stall
    # how often the launcher restarts every rank after a failure (torchrun --max-restarts): each restart is a new
    # attempt of the run (runners/judge/attempts.py); 0: the first failure ends the run
    max_restarts: int = 0


PLAIN = RunnerTraits()  # what a judge is told when nobody says otherwise
