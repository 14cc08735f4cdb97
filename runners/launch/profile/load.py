"""Loading: a profile file (or `ddptui -- CMD`) read within bounds, overridden by --set, built and checked."""
from __future__ import annotations

import os
import re
import stat
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..registry import RUNNERS
from .build import _build
from .errors import ProfileError, _Loc
from .model import Profile
from .overrides import _apply_override
from .readers import _got
from .tree import MAX_PROFILE_BYTES, _Node, _parse_text

ADHOC_SOURCE = "<command line>"


def _too_big(size: int) -> str | None:
    if size <= MAX_PROFILE_BYTES:
        return None
    return f"profile too large: {size} bytes, at most {MAX_PROFILE_BYTES} (a profile is a few hundred bytes of YAML)"


def _read_bounded(p: Path, file: str) -> bytes:
    """The file's bytes, refused by size before anything is read, and read no further than the bound."""
    try:
        st = os.stat(p)  # before opening: a FIFO would block open(), /dev/zero never ends
        if stat.S_ISDIR(st.st_mode):
            raise ProfileError(file, None, None, None, "is a folder, expected a YAML file")
        if not stat.S_ISREG(st.st_mode):
            raise ProfileError(file, None, None, None, "not a regular file, expected a YAML file")
        problem = _too_big(st.st_size)
        if problem is None:
            with open(p, "rb") as fh:
                data = fh.read(MAX_PROFILE_BYTES + 1)  # it may have grown since the stat
            problem = _too_big(len(data)) and f"profile too large: more than {MAX_PROFILE_BYTES} bytes"
    except FileNotFoundError:
        raise ProfileError(file, None, None, None, "no such file") from None
    except IsADirectoryError:
        raise ProfileError(file, None, None, None, "is a folder, expected a YAML file") from None
    except OSError as exc:
        raise ProfileError(file, None, None, None, f"cannot read: {exc.strerror or exc}") from None
    if problem is not None:
        raise ProfileError(file, None, None, None, problem)
    return data


def load_profile(path: str | Path, overrides: Sequence[str] = ()) -> Profile:
    """Read, override and validate one profile file; any problem is a one-line ProfileError."""
    file = str(path)
    p = Path(path)
    data = _read_bounded(p, file)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        col = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise ProfileError(file, line, col, None, "not UTF-8 text") from None
    root = _parse_text(text, file)
    if root is None:
        raise ProfileError(file, 1, 1, None, "empty profile, expected a mapping with at least 'workload'")
    if root.kind != "map":
        raise root.loc.error(None, f"expected a mapping of fields at the top level, got {_got(root)}")
    for item in overrides:
        _apply_override(root, item)
    return replace(_build(root, file, Path(os.path.abspath(p.parent)), p.stem), overrides=tuple(overrides))


def adhoc_profile(command: Sequence[str], overrides: Sequence[str] = ()) -> Profile:
    """A profile for `ddptui -- CMD...`: the command runs as given, under torchrun when it is torchrun, as a Slurm
    step or job when it is srun."""
    cmd = [str(c) for c in command]
    loc = _Loc(ADHOC_SOURCE)
    if not cmd:
        raise loc.error(None, "expected a command after --")
    runner, nproc, nnodes = _runner_of(cmd)

    def scalar(v: Any) -> tuple[_Loc, _Node]:
        return loc, _Node("scalar", v, loc, str(v))

    workload = _Node("map", {"command": (loc, _Node("seq", [scalar(c)[1] for c in cmd], loc))}, loc)
    root = _Node("map", {"name": scalar(adhoc_name(cmd)), "runner": scalar(runner),
                         "nproc": scalar(nproc), "nnodes": scalar(nnodes), "workload": (loc, workload)}, loc)
    for item in overrides:
        _apply_override(root, item)
    return _build(root, ADHOC_SOURCE, Path(os.getcwd()), "adhoc")


_LAUNCHERS = {"python", "python3", "torchrun", "srun", "mirage", "env", "uv", "exec", "nohup"}
_LAUNCHER_MODULES = {"torch.distributed.run", "torch.distributed.launch", "torch_xla.distributed.xla_run"}


def adhoc_name(cmd: Sequence[str]) -> str:
    """The name of a wrapped command's profile, and so of its record: `adhoc-<script>` after the program it runs
    (`python train.py`, `torchrun ... train.py` -> adhoc-train; `python -m pkg.trainer` -> adhoc-trainer; a program
    of its own -> its file name), `adhoc` when none is named (`python -c ...`)."""
    script = next((Path(c).stem for c in cmd if c.endswith(".py") and not c.startswith("-")), None)
    if script is None:
        mods = [cmd[i + 1] for i, c in enumerate(cmd[:-1]) if c == "-m" and cmd[i + 1] not in _LAUNCHER_MODULES]
        if mods:
            script = mods[0].rsplit(".", 1)[-1]
        elif "-c" not in cmd:  # a program of its own: the first named by a path, else the last word
            own = [c for c in cmd if not c.startswith("-") and "=" not in c and not c.isdigit()
                   and Path(c).name.split(".")[0].rstrip("0123456789") not in _LAUNCHERS]
            pick = next((c for c in own if "/" in c), own[-1] if own else None)
            script = Path(pick).stem if pick else None
    safe = re.sub(r"[^\w.-]+", "_", script or "").strip("._-")[:120]
    return f"adhoc-{safe}" if safe else "adhoc"


def _runner_of(cmd: Sequence[str]) -> tuple[str, int, int]:
    """The runner `ddptui -- CMD` runs under, with its counts: the first that wraps the command (torchrun's line, srun's),
    else the one that runs any command as each rank, one rank."""
    for runner in RUNNERS.values():
        counts = runner.wraps(cmd)
        if counts is not None:
            return runner.name, *counts
    return next(r.name for r in RUNNERS.values() if r.runs_any_command), 1, 1
