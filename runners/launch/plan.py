"""A launch described as data: what every process will be started with, printable before anything runs."""
from __future__ import annotations

import json
import shlex
from dataclasses import asdict, dataclass, field

from ..evidence.words import rank_list


@dataclass(frozen=True)
class LogSource:
    """A file that some rank's output is written into (by the launcher or by our own spawn)."""

    path: str  # absolute path, or a glob (torchrun's run-id folder is only known once it starts)
    rank: int | None  # global rank whose output lands there; None: the launcher's own output
    stream: str  # "out" or "err"
    # True: `rank` is a guess; the first hello report read from the files of this (node, local rank) names the
    # real global rank (torchrun's c10d rendezvous gives node ranks in arrival order, not in launch order)
    learn_rank: bool = False


@dataclass(frozen=True)
class ProcSpec:
    """One process ddptui starts itself (a launcher agent, or a rank when there is no launcher)."""

    name: str  # "torchrun", "node0", "rank3", "mirage", ...
    argv: tuple[str, ...]
    env: dict[str, str]  # only what ddptui adds or changes; the child inherits the rest
    cwd: str
    ranks: tuple[int, ...]  # global ranks that live under this process
    stdout: str  # file the process's stdout is redirected to
    stderr: str  # file the process's stderr is redirected to
    stdout_rank: int | None = None  # rank of those files' lines; None: launcher output that may carry prefixes


@dataclass(frozen=True)
class SlurmJob:
    """What the engine needs to follow and end a Slurm job or step that one of the plan's processes starts."""

    mode: str  # "sbatch": the process is `sbatch --parsable` (job id: its first stdout line), whose batch script
    #            starts ddptui's engine in the job (runners/launch/slurm.py); nothing else of the run is on this side;
    #            "step": the process is `srun` inside an allocation (job id known now, from SLURM_JOB_ID)
    launch: str  # "srun": one task per rank; "torchrun": one torchrun agent per node
    name: str  # --job-name (sbatch) / step name (srun) ddptui gave it: how squeue finds it
    job_id: str | None = None  # known at plan time in "step" mode
    script: str | None = None  # path of the batch script written for "sbatch" mode (its text is in the run record)
    script_text: str | None = None  # that script's text: the plan is data, the session writes it (slurm.prepare)
    attempt: int | None = None  # the engine inside a ddptui-submitted batch job: which attempt (SLURM_RESTART_COUNT)


@dataclass(frozen=True)
class LaunchPlan:
    runner: str
    world_size: int
    procs: tuple[ProcSpec, ...]
    sources: tuple[LogSource, ...] = field(default=())  # extra per-rank files written by a launcher
    notes: tuple[str, ...] = field(default=())  # what the plan changed or assumed, shown by --dry-run
    job: SlurmJob | None = None  # set when the ranks run under a Slurm job ddptui submits or a step it starts
    # the ranks this ddptui's processes run when they are only part of the world: one node of a multi-node torchrun
    # that each node runs under its own ddptui (their numbers are the plan's guess until each rank's hello names it);
    # None: every rank of the world is ddptui's
    ranks_here: tuple[int, ...] | None = None

    def to_json(self) -> dict:
        return asdict(self)

    def describe(self) -> str:
        """The --dry-run text: argv, env and cwd of every process."""
        out = [f"runner: {self.runner}   world size: {self.world_size}   processes: {len(self.procs)}"]
        if self.ranks_here is not None:
            out[0] += f"   ranks here: {len(self.ranks_here)} of {self.world_size}"
        for p in self.procs:
            ranks = rank_list(p.ranks, ",") or "-"
            out.append(f"\n[{p.name}] ranks {ranks}")
            out.append(f"  cwd:  {p.cwd}")
            out.append(f"  argv: {shlex.join(p.argv)}")
            for k in sorted(p.env):
                out.append(f"  env:  {k}={p.env[k]}")
            out.append(f"  stdout -> {p.stdout}")
            out.append(f"  stderr -> {p.stderr}")
        if self.sources:
            out.append("\nrank logs written by the launcher:")
            for s in self.sources:
                out.append(f"  rank {s.rank} {s.stream}: {s.path}")
        if self.job is not None:
            j = self.job
            how = "sbatch, its engine in the job" if j.mode == "sbatch" else "an srun step"
            out.append(f"\nslurm: {j.mode} ({how}), launch {j.launch}, job name {j.name}"
                       + (f", job id {j.job_id}" if j.job_id else ""))
            if j.script_text is not None:
                out.append(f"batch script {j.script}:")
                out += [f"  | {line}" for line in j.script_text.rstrip("\n").split("\n")]
        for n in self.notes:
            out.append(f"note: {n}")
        return "\n".join(out)

    def dumps(self) -> str:
        return json.dumps(self.to_json(), indent=2)
