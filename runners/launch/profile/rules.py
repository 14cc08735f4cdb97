"""The cross-field rules, once a profile is built: what its runner would ignore or refuse, located at the field."""
from __future__ import annotations

from ..registry import SECTIONS, runner_for
from .endpoint import unbindable
from .model import RDZV_KEYS, Profile, default
from .readers import _Fields


def check(f: _Fields, profile: Profile) -> Profile:
    """Every rule, in the order the errors are found; the profile as it runs (a command may choose its runner)."""
    _check_rendezvous(f, profile)
    _check_rdzv(f, profile)
    _check_sections(f, profile)
    _check_restarts(f, profile)
    return runner_for(profile.runner).check(f, profile)


def _check_rendezvous(f: _Fields, profile: Profile) -> None:
    runner = runner_for(profile.runner)
    for name, value in (("master_port", profile.master_port), ("master_addr", profile.master_addr)):
        node = f.node(name)
        if node is None or value == default(name):
            continue
        problem = runner.rendezvous_problem(name, bool(profile.workload.command))
        if problem is None and name == "master_addr":
            problem = unbindable(profile.master_addr)
        if problem is not None:
            raise node.loc.error(name, problem)


def _check_rdzv(f: _Fields, profile: Profile) -> None:
    runner = runner_for(profile.runner)
    for name in RDZV_KEYS:
        node = f.node(name)
        if node is None or getattr(profile, name) is None:
            continue
        problem = runner.rdzv_problem(name, bool(profile.workload.command), profile.rdzv_backend)
        if problem is None and name == "rdzv_endpoint":
            if f.node("master_addr") is not None or f.node("master_port") is not None:
                problem = "give the c10d endpoint either here or as master_addr/master_port, not both"
            else:
                problem = unbindable(profile.rendezvous[0])
        if problem is None and name == "local_addr":
            problem = unbindable(str(profile.local_addr))
        if problem is not None:
            raise node.loc.error(name, problem)


def _check_sections(f: _Fields, profile: Profile) -> None:
    """A runner's own block (slurm:) in a profile of another runner is an error."""
    for key, owner in SECTIONS.items():
        node = f.node(key)
        if owner.section_is_own and owner.name != profile.runner and node is not None and node.kind == "map" \
                and node.value:
            raise node.loc.error(key, f"the {key} block is for runner: {owner.name} (this profile's runner is"
                                      f" {profile.runner})")


def _check_restarts(f: _Fields, profile: Profile) -> None:
    """max_restarts is torchrun's: its elastic agent restarts the worker group; no other runner restarts ranks."""
    node = f.node("max_restarts")
    if node is not None and profile.max_restarts and profile.runner != "torchrun":
        raise node.loc.error("max_restarts", f"max_restarts is torchrun's (its elastic agent restarts the ranks); the "
                                             f"{profile.runner} runner restarts nothing")
