"""How many ranks a profile may ask for: a bound from this machine's cores, raised on purpose with max_world_size."""
from __future__ import annotations

import math
import os
from collections.abc import Sequence

from .errors import _Loc
from .tree import _Node

# Ranks all run on this machine (a Slurm job's: those of one node): past 4 per core (and 64 in all) a world size is
# almost surely a typo.
# `max_world_size` raises the bound for a deliberate big run, never past WORLD_CEILING.
WORLD_PER_CPU, WORLD_FLOOR, WORLD_CEILING = 4, 64, 65536


def default_max_world_size(cpus: int | None = None) -> int:
    """The world size a profile may ask for without `max_world_size`: 4 ranks per CPU core, at least 64."""
    cpus = os.cpu_count() if cpus is None else cpus
    return max(WORLD_FLOOR, WORLD_PER_CPU * (cpus or 1))


def _count_text(n: int) -> str:
    # str() of an int past 4300 digits raises, and a line must stay readable
    return str(n) if n.bit_length() <= 100 else f"about 10^{int(n.bit_length() * math.log10(2))}"


def world_problem(what: str, ranks: int, limit: int, explicit: bool) -> str | None:
    """Why `ranks` processes (described by `what`) are more than a profile may ask for, or None when they fit."""
    if ranks <= limit:
        return None
    asked = f"{what} = {_count_text(ranks)} ranks" if what else f"{_count_text(ranks)} ranks"
    if explicit:
        return f"{asked}, more than max_world_size {limit}"
    fix = (f"to run that many on purpose set max_world_size: {ranks} (or --set max_world_size={ranks})"
           if ranks <= WORLD_CEILING else f"max_world_size can allow at most {WORLD_CEILING}")
    return (f"{asked}, more than the {limit} allowed by default on this machine ({WORLD_PER_CPU} per CPU core,"
            f" at least {WORLD_FLOOR}); {fix}")


def _child(node: _Node | None, key: str) -> _Node | None:
    entry = node.value.get(key) if node is not None and node.kind == "map" else None
    return entry[1] if entry else None


def _check_world(factors: Sequence[tuple[str, _Node | None, int]], where: _Loc, limit: int, explicit: bool) -> None:
    """Refuse a world (the product of the factors) bigger than `limit`, located at its biggest given factor."""
    ranks = math.prod(value for _, _, value in factors)
    what = " x ".join(f"{name} {_count_text(value)}" for name, _, value in factors) if len(factors) > 1 else ""
    problem = world_problem(what, ranks, limit, explicit)
    if problem is None:
        return
    name, node, _ = max([fac for fac in factors if fac[1] is not None] or factors, key=lambda fac: fac[2])
    raise (node.loc if node is not None else where).error(name, problem)
