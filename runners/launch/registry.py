"""The runners ddptui has, by name, in the order a profile's `runner:` lists them."""
from __future__ import annotations

from ..judge.runner_traits import RunnerTraits
from .env_runner import EnvRunner
from .mirage import MirageRunner
from .runner import Runner
from .slurm import SlurmRunner
from .torchrun import TorchrunRunner
from .xla import XlaRunner

RUNNERS: dict[str, Runner] = {r.name: r for r in (TorchrunRunner(), EnvRunner(), XlaRunner(), MirageRunner(),
                                                  SlurmRunner())}
NAMES = tuple(RUNNERS)
SECTIONS: dict[str, Runner] = {r.section: r for r in RUNNERS.values() if r.section is not None}


def runner_for(name: str) -> Runner:
    try:
        return RUNNERS[name]
    except KeyError:
        raise ValueError(f"unknown runner {name!r}") from None


def traits_of(profile) -> RunnerTraits:
    """The judge's view of the profile's runner; an attached job's profile (runner: attach) has the plain one."""
    runner = RUNNERS.get(profile.runner)
    return runner.traits(profile) if runner is not None else RunnerTraits()
