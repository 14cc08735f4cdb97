"""What a user's own srun command line says (it is srun, where its program starts, its counts, its output flags)."""
from __future__ import annotations

import os
from collections.abc import Sequence

# srun's options that take a value as the next word when written without '=' (short ones always take it so)
_SHORT_VALUE = set("AbcCdDeGiJLmMnNopqrStTwWx")
_LONG_VALUE = {
    "--account", "--acctg-freq", "--begin", "--chdir", "--clusters", "--comment", "--constraint", "--core-spec",
    "--cpu-bind", "--cpu-freq", "--cpus-per-gpu", "--cpus-per-task", "--deadline", "--dependency", "--distribution",
    "--error", "--export", "--gpu-bind", "--gpus", "--gpus-per-node", "--gpus-per-socket", "--gpus-per-task",
    "--gres", "--gres-flags", "--hint", "--input", "--job-name", "--jobid", "--licenses", "--mem", "--mem-bind",
    "--mem-per-cpu", "--mem-per-gpu", "--mincpus", "--mpi", "--nodefile", "--nodelist", "--nodes", "--ntasks",
    "--ntasks-per-core", "--ntasks-per-gpu", "--ntasks-per-node", "--ntasks-per-socket", "--open-mode", "--output",
    "--partition", "--prolog", "--qos", "--relative", "--reservation", "--signal", "--sockets-per-node",
    "--task-epilog", "--task-prolog", "--threads-per-core", "--time", "--time-min", "--tmp", "--wait", "--exclude",
    "--propagate", "--switches", "--uid", "--gid", "--nice", "--priority", "--network", "--profile",
}
OUTPUT_FLAGS = ("-o", "--output", "-e", "--error", "-l", "--label")
JOB_NAME_FLAGS = ("-J", "--job-name")


def is_srun(argv: Sequence[str]) -> bool:
    return bool(argv) and os.path.basename(argv[0]) == "srun"


def _options(argv: Sequence[str]) -> list[tuple[str, str | None]]:
    """srun's own options as (flag, value) up to its program; the program starts where the walk stops."""
    return _walk(argv)[0]


def _walk(argv: Sequence[str]) -> tuple[list[tuple[str, str | None]], int]:
    out: list[tuple[str, str | None]] = []
    i = 1
    while i < len(argv):
        word = argv[i]
        if word == "--":
            return out, i + 1
        if not word.startswith("-") or word == "-":
            return out, i
        if word.startswith("--"):
            name, eq, value = word.partition("=")
            if eq:
                out.append((name, value))
            elif name in _LONG_VALUE and i + 1 < len(argv):
                out.append((name, argv[i + 1]))
                i += 1
            else:
                out.append((name, None))
        elif word[1] in _SHORT_VALUE:
            if len(word) > 2:
                out.append((word[:2], word[2:]))
            elif i + 1 < len(argv):
                out.append((word, argv[i + 1]))
                i += 1
            else:
                out.append((word, None))
        else:
            out.append((word[:2], None))  # a flag; combined short flags like -lv are rare: the first one counts
        i += 1
    return out, len(argv)


def program_start(argv: Sequence[str]) -> int:
    """The index of the program srun runs (past srun's options); len(argv) when there is none."""
    return _walk(argv)[1]


def value(argv: Sequence[str], names: Sequence[str]) -> str | None:
    found = None
    for name, v in _options(argv):
        if name in names:
            found = v  # the last one wins, as for srun
    return found


def has(argv: Sequence[str], names: Sequence[str]) -> bool:
    return any(name in names for name, _ in _options(argv))


def _count(argv: Sequence[str], names: Sequence[str]) -> int | None:
    v = value(argv, names)
    return int(v) if v is not None and v.isdigit() and int(v) >= 1 else None


def counts(argv: Sequence[str]) -> tuple[int, int]:
    """(ranks per node, nodes) the command asks for, as ddptui tracks them: nproc x nnodes = the task count.
    Uneven tasks over nodes (-n 3 -N 2) count as 3 x 1; the ranks' hellos say where each runs."""
    nodes = _count(argv, ("-N", "--nodes")) or 1
    per_node = _count(argv, ("--ntasks-per-node",))
    if per_node is not None:
        return per_node, nodes
    ntasks = _count(argv, ("-n", "--ntasks"))
    if ntasks is None:
        return 1, nodes  # srun's default: one task per node
    return (ntasks // nodes, nodes) if ntasks % nodes == 0 else (ntasks, 1)
