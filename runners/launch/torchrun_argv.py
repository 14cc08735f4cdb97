"""What a user's own torchrun command line says (it is torchrun, where its options start, its counts): read in one place."""
from __future__ import annotations

import os
from collections.abc import Sequence

NPROC_FLAGS = ("--nproc_per_node", "--nproc-per-node")
NNODES_FLAGS = ("--nnodes",)
NODE_RANK_FLAGS = ("--node-rank", "--node_rank")
RDZV_BACKEND_FLAGS = ("--rdzv-backend", "--rdzv_backend")
MAX_RESTARTS_FLAGS = ("--max-restarts", "--max_restarts")


def launcher_end(argv: Sequence[str]) -> int | None:
    """The index just past the launcher (`torchrun`, or `python -m torch.distributed.run`) where torchrun's own
    options begin; None when the command is not torchrun."""
    if argv and os.path.basename(argv[0]) == "torchrun":
        return 1
    for i in range(len(argv) - 1):
        if argv[i] == "-m" and argv[i + 1] == "torch.distributed.run":
            return i + 2
    return None


def flag(argv: Sequence[str], names: Sequence[str]) -> str | None:
    """The value of a flag given as `--name V` or `--name=V`, the first one given; None when it is not there."""
    for i, word in enumerate(argv):
        for name in names:
            if word == name and i + 1 < len(argv):
                return argv[i + 1]
            if word.startswith(name + "="):
                return word[len(name) + 1:]
    return None


def int_flag(argv: Sequence[str], names: Sequence[str], least: int = 1) -> int | None:
    """The value of a flag like --nproc_per_node 4 / --nproc-per-node=4 when it is an integer >= least, else None."""
    for i, word in enumerate(argv):
        for name in names:
            value = None
            if word == name and i + 1 < len(argv):
                value = argv[i + 1]
            elif word.startswith(name + "="):
                value = word[len(name) + 1:]
            if value is not None and value.isdigit() and int(value) >= least:
                return int(value)
    return None


def nproc_per_node(argv: Sequence[str]) -> int | None:
    return int_flag(argv, NPROC_FLAGS)


def nnodes(argv: Sequence[str]) -> int | None:
    return int_flag(argv, NNODES_FLAGS)


def max_nodes(argv: Sequence[str]) -> int | None:
    """The most nodes the job can have: --nnodes N, or the MAX of an elastic --nnodes MIN:MAX; None when not given."""
    value = flag(argv, NNODES_FLAGS)
    if value is None:
        return None
    _, _, top = value.rpartition(":")
    return int(top) if top.isdigit() and int(top) >= 1 else None


def node_rank(argv: Sequence[str]) -> int | None:
    """--node-rank K of a static rendezvous (the agent's ranks are then K * nproc + local rank); None when not given."""
    return int_flag(argv, NODE_RANK_FLAGS, least=0)


def rdzv_backend(argv: Sequence[str]) -> str:
    """The rendezvous backend the command asks for ("static" when it names none: torchrun's default)."""
    return flag(argv, RDZV_BACKEND_FLAGS) or "static"


def max_restarts(argv: Sequence[str]) -> int:
    """--max-restarts N: how often torchrun's agent restarts the worker group after a failure (0 when not given)."""
    return int_flag(argv[:script_start(argv)], MAX_RESTARTS_FLAGS, least=0) or 0


def script_start(argv: Sequence[str]) -> int:
    """The index of the program torchrun runs (its first word that is no option or option value); len(argv) if none.
    torchrun's options are `--name V` or `--name=V`, except its switches (--standalone, -m, --no-python, ...)."""
    head = launcher_end(argv) or 0
    i = head
    while i < len(argv):
        word = argv[i]
        if not word.startswith("-"):
            return i
        if "=" in word or word in _SWITCHES:
            i += 1
        else:
            i += 2
    return len(argv)


_SWITCHES = ("--standalone", "-m", "--module", "--no-python", "--no_python", "--run-path", "--run_path")
