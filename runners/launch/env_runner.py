"""The env:// runner: no launcher, ddptui starts every rank itself with the torch.distributed env:// variables."""
from __future__ import annotations

import os
from pathlib import Path

from .plan import LaunchPlan, ProcSpec
from .profile.model import Profile
from .rankenv import base_env, workload_argv
from .runner import Runner


def rank_env(rank: int, profile: Profile, port: int) -> dict[str, str]:
    node, local = divmod(rank, profile.nproc)
    return {
        "RANK": str(rank),
        "WORLD_SIZE": str(profile.world_size),
        "LOCAL_RANK": str(local),
        "LOCAL_WORLD_SIZE": str(profile.nproc),
        "NODE_RANK": str(node),
        "GROUP_RANK": str(node),
        "GROUP_WORLD_SIZE": str(profile.nnodes),  # as torchrun gives it: the ranks name their node by it
        "MASTER_ADDR": profile.master_addr,
        "MASTER_PORT": str(port),
    }


def plan(profile: Profile, run_dir: Path, port: int, dashboard_pid: int | None = None) -> LaunchPlan:
    common = base_env(profile, dashboard_pid, run_dir=run_dir)
    argv = tuple(workload_argv(profile))
    procs = []
    for rank in range(profile.world_size):
        env = {**common, **rank_env(rank, profile, port)}
        raw = run_dir / "raw"
        procs.append(ProcSpec(f"rank{rank}", argv, env, os.getcwd(), (rank,),
                              str(raw / f"rank{rank}.out"), str(raw / f"rank{rank}.err"), stdout_rank=rank))
    notes: tuple[str, ...] = ()
    if profile.nnodes > 1:
        notes = (f"{profile.nnodes} emulated nodes x {profile.nproc} ranks, one process per rank, "
                 f"rendezvous env:// at {profile.master_addr}:{port}",)
    return LaunchPlan("env", profile.world_size, tuple(procs), (), notes)


class EnvRunner(Runner):
    name = "env"
    runs_any_command = True

    def plan(self, profile: Profile, run_dir: Path, port: int, dashboard_pid: int | None = None) -> LaunchPlan:
        return plan(profile, run_dir, port, dashboard_pid)
