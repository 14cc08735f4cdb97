"""Reads the Flight Recorder dumps NCCL's watchdog writes itself at a timeout (RUN/fr/nccl_trace_rank_<R>) at a run's end."""
from __future__ import annotations

import pickle
import re
from collections.abc import Iterable
from pathlib import Path

from ..launch.fr_env import nccl_dump_prefix

# torch's DebugInfoWriter writes to TORCH_FR_DUMP_TEMP_FILE + rank, no extension: "nccl_trace_rank_1"
PREFIX = Path(nccl_dump_prefix(".")).name
_NAME = re.compile(rf"^{PREFIX}(\d+)$")


def rank_files(names: Iterable[str]) -> dict[int, str]:
    """Rank -> file name of every dump among `names` (a half-written 'nccl_trace_rank_1.tmp' is none)."""
    out = {}
    for n in names:
        m = _NAME.match(n)
        if m:
            out[int(m.group(1))] = n
    return out


class _PlainData(pickle.Unpickler):
    """A Flight Recorder dump is dicts, lists, tuples, strings and numbers: anything naming a class is not one."""

    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"names {module}.{name}, not a Flight Recorder dump")


def read(folder: Path | str) -> tuple[dict[int, dict], dict[int, str]]:
    """(rank -> dump, rank -> why its file could not be read) of the dumps in the run's fr/ folder. These are files
    the run's own ranks wrote into the run's own record (torch's pickle, the format its flight_recorder loader
    reads); still they are loaded as plain data only."""
    folder = Path(folder)
    try:
        names = [p.name for p in folder.iterdir()]
    except OSError:
        return {}, {}
    dumps, problems = {}, {}
    for rank, name in sorted(rank_files(names).items()):
        try:
            with open(folder / name, "rb") as f:
                d = _PlainData(f).load()
        except (OSError, pickle.UnpicklingError, EOFError, ValueError, TypeError) as e:
            problems[rank] = f"fr/{name} unreadable ({type(e).__name__}: {e})"
            continue
        if not isinstance(d, dict) or "entries" not in d:
            problems[rank] = f"fr/{name} is not a Flight Recorder dump"
            continue
        dumps[rank] = d
    return dumps, problems
