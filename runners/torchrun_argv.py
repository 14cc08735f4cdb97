"""What a user's own torchrun command line says (it is torchrun, where its options start, its counts): read in one place."""
from __future__ import annotations

import os
from typing import Sequence

NPROC_FLAGS = ("--nproc_per_node", "--nproc-per-node")
NNODES_FLAGS = ("--nnodes",)


def launcher_end(argv: Sequence[str]) -> int | None:
    """The index just past the launcher (`torchrun`, or `python -m torch.distributed.run`) where torchrun's own
    options begin; None when the command is not torchrun."""
    if argv and os.path.basename(argv[0]) == "torchrun":
        return 1
    for i in range(len(argv) - 1):
        if argv[i] == "-m" and argv[i + 1] == "torch.distributed.run":
            return i + 2
    return None


def int_flag(argv: Sequence[str], names: Sequence[str]) -> int | None:
    """The value of a flag like --nproc_per_node 4 / --nproc-per-node=4 when it is an integer >= 1, else None."""
    for i, word in enumerate(argv):
        for name in names:
            value = None
            if word == name and i + 1 < len(argv):
                value = argv[i + 1]
            elif word.startswith(name + "="):
                value = word[len(name) + 1:]
            if value is not None and value.isdigit() and int(value) >= 1:
                return int(value)
    return None


def nproc_per_node(argv: Sequence[str]) -> int | None:
    return int_flag(argv, NPROC_FLAGS)


def nnodes(argv: Sequence[str]) -> int | None:
    return int_flag(argv, NNODES_FLAGS)
