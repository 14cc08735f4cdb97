"""Find the ranks of a PyTorch job ddptui did not launch, from any of its processes or a Slurm job id."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class RankOutput:
    kind: str  # "file" | "terminal" | "pipe" | "socket" | "none" | "unreadable"
    path: str | None  # the file to tail when kind == "file"
    note: str  # what the pane says when ddptui cannot follow it, "" for files


@dataclass(frozen=True)
class AttachedRank:
    rank: int
    local_rank: int | None
    world_size: int | None
    pid: int
    host: str
    node: str
    stdout: RankOutput
    stderr: RankOutput


@dataclass(frozen=True)
class Unreadable:
    pid: int
    reason: str  # a process of the job ddptui cannot read, and why


@dataclass(frozen=True)
class AttachedJob:
    asked: str  # the pid or Slurm job id the user gave
    kind: str  # "torchrun" | "spawn" | "env" | "slurm"
    launcher_pid: int | None  # torchrun's agent: SIGTERM to it stops the job
    launcher_argv: tuple[str, ...]
    ranks: dict[int, AttachedRank] = field(default_factory=dict)
    unreadable: tuple[Unreadable, ...] = ()
    slurm_job: str | None = None
    world_size: int | None = None


class NotAJob(Exception):
    """str(e) is the one line the CLI prints (exit 2)."""


def find_job(pid: int) -> AttachedJob:
    raise NotImplementedError  # filled in next commit


def find_slurm_job(job_id: str) -> AttachedJob:
    raise NotImplementedError  # filled in next commit
