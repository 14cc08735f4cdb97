"""A profile's name: it names the run folders, so it must fit a file name."""
from __future__ import annotations

from .errors import _Loc
from .readers import _fail, _str
from .tree import _Node

# A run's folder is `<YYYYmmdd-HHMMSS>-<name>[-N]` (runners/edge/record.py: never more bytes than the name) and a file name
# holds 255 bytes (NAME_MAX); its Slurm job is named `ddptui-<folder>`. 200 leaves room for both.
MAX_NAME_BYTES = 200


def _name(node: _Node, field: str) -> str:
    value = _str()(node, field)
    if not value or "/" in value or value in (".", ".."):
        raise _fail(node, field, "a non-empty name without '/'")
    problem = name_length_problem(value)
    if problem:
        raise node.loc.error(field, problem)
    return value


def name_length_problem(name: str) -> str | None:
    """Why a profile name cannot name its runs' folders, or None."""
    size = len(name.encode("utf-8", "surrogatepass"))
    if size <= MAX_NAME_BYTES:
        return None
    return (f"expected a name of at most {MAX_NAME_BYTES} bytes (it names the run folder <time>-<name>, whose name"
            f" the filesystem limits to 255), got {size} bytes")


def _default_name(stem: str, where: _Loc) -> str:
    """The file's stem, which names the profile when it has no `name`: it must fit a run folder's name too."""
    problem = name_length_problem(stem)
    if problem:
        raise _Loc(where.file).error("name", f"the file's name is the profile's name when it has no 'name' field:"
                                             f" {problem}; give it a shorter 'name'")
    return stem
