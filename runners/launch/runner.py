"""The Runner protocol: what each runner declares (as harlequin's adapters declare their options) — its profile
section, its cross-field rules, what the judge must know of its ranks, and its plan."""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from ..judge.runner_traits import RunnerTraits
from .plan import LaunchPlan
from .rankenv import base_env

if TYPE_CHECKING:
    from .profile.errors import _Loc
    from .profile.model import Profile
    from .profile.readers import _Fields
    from .profile.tree import _Node


class Runner:
    """One way of starting the ranks. A subclass sets `name` and `plan`; everything else has the plain default."""

    name: ClassVar[str]
    # the profile block this runner reads (`mirage:`, `xla:`, `slurm:`), through `read_section`
    section: ClassVar[str | None] = None
    # its block in a profile of another runner is an error (else it is read, and unused)
    section_is_own: ClassVar[bool] = False
    # the ranks run on other machines (Slurm's nodes): this machine's cores bound one node's ranks, not the world
    ranks_elsewhere: ClassVar[bool] = False
    # ddptui picks the rendezvous port on this machine before planning (the slurm runner's is chosen on the first node)
    picks_port: ClassVar[bool] = True
    # `ddptui -- CMD` runs under it when no runner wraps CMD (the env:// runner runs any command as each rank)
    runs_any_command: ClassVar[bool] = False
    # the ranks run on emulated GPUs (mirage): preflight checks the emulator and the ROCm SDK first
    emulated: ClassVar[bool] = False

    def base_env(self, profile: Profile, dashboard_pid: int | None = None) -> dict[str, str]:
        """What ddptui adds to the environment of the processes this runner starts (rankenv.base_env)."""
        return base_env(profile, dashboard_pid)

    def read_section(self, node: _Node | None, where: _Loc, base: Path, nproc: int, nnodes: int) -> Any:
        """The runner's own block, read and validated (`section` names it)."""
        raise NotImplementedError(f"the {self.name} runner has no profile section")

    def wraps(self, command: Sequence[str]) -> tuple[int, int] | None:
        """(nproc, nnodes) when `ddptui -- CMD` is a launcher's command line this runner wraps, else None."""
        return None

    def rendezvous_problem(self, field: str, wrapped_command: bool) -> str | None:
        """Why this runner would ignore the master_addr/master_port a profile chose, or None (then it is used)."""
        return None

    def rdzv_problem(self, field: str, wrapped_command: bool, backend: str) -> str | None:
        """Why a torchrun rendezvous field (rdzv_backend, rdzv_endpoint, rdzv_id, local_addr) does not apply, or None."""
        return f"{field} is torchrun's; the {self.name} runner starts no torchrun agents"

    def check(self, f: _Fields, profile: Profile) -> Profile:
        """The runner's own cross-field rules, once the profile is built: a located ProfileError, or the profile as it
        runs."""
        return profile

    def traits(self, profile: Profile) -> RunnerTraits:
        """What the judge must know of the ranks this runner starts for the profile."""
        return RunnerTraits()

    def plan(self, profile: Profile, run_dir: Path, port: int, dashboard_pid: int | None = None) -> LaunchPlan:
        """Every process the launch starts, as data (runners/launch/plan.py)."""
        raise NotImplementedError
