"""The workload block: which program the ranks run (built-in, script, module or command) and on which interpreter."""
from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import Any

from ..rank_python import ENV, default_python
from .errors import _Loc
from .model import WORKLOAD_KEYS, WORKLOAD_KINDS, Workload
from .readers import _argv, _fail, _Fields, _got, _is_dir, _is_file, _path_value, _str, _suggest
from .tree import _Node

WORKLOADS_DIR = Path(__file__).resolve().parent.parent.parent / "workloads"


def _interpreter(f: _Fields, base: Path) -> str:
    py, venv = f.node("python"), f.node("venv")
    if py is not None and venv is not None:
        keys = list(f.items)
        kloc = f.items["venv" if keys.index("venv") > keys.index("python") else "python"][0]  # the later one
        raise kloc.error(f.path, "expected at most one of python, venv, got both")
    if venv is not None:
        folder = _path_value(venv, f.dotted("venv"), base)
        exe = folder / "bin" / "python"
        if not _is_dir(folder):
            raise venv.loc.error(f.dotted("venv"), f"venv folder not found: {folder}")
        if not (_is_file(exe) and os.access(exe, os.X_OK)):
            raise venv.loc.error(f.dotted("venv"), f"no executable bin/python in venv {folder}")
        return str(exe)
    if py is None:
        try:
            return default_python()
        except ValueError as e:
            raise f.loc.error(f.dotted("python"), str(e)) from None
    value = _str()(py, f.dotted("python"))
    if not value:
        raise _fail(py, f.dotted("python"), "an interpreter path or name")
    if os.sep in value or value.startswith("~"):
        exe = _path_value(py, f.dotted("python"), base)
        if not _is_file(exe):
            raise py.loc.error(f.dotted("python"), f"interpreter not found: {exe}")
        if not os.access(exe, os.X_OK):
            raise py.loc.error(f.dotted("python"), f"interpreter is not executable: {exe}")
        return str(exe)
    found = shutil.which(value)
    if found is None:
        raise py.loc.error(f.dotted("python"), f"interpreter '{value}' not found on PATH")
    return os.path.abspath(found)


def builtin_names() -> list[str]:
    """Names of the built-in workloads (files in runners/workloads/, private ones excluded)."""
    if not WORKLOADS_DIR.is_dir():
        return []
    return sorted(p.stem for p in WORKLOADS_DIR.glob("*.py") if not p.stem.startswith("_"))


_MODULE_RE = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*\Z")


def _workload(node: _Node | None, root_loc: _Loc, base: Path) -> Workload:
    if node is None:
        raise root_loc.error("workload", "missing required field 'workload'", show_field=False)
    f = _Fields(node, "workload", WORKLOAD_KEYS, root_loc, Workload)
    kinds = [k for k in f.items if k in WORKLOAD_KINDS]
    if len(kinds) != 1:
        got = "none" if not kinds else " and ".join(kinds)
        loc = f.items[kinds[1]][0] if len(kinds) > 1 else f.loc
        raise loc.error("workload", f"expected exactly one of {', '.join(WORKLOAD_KINDS)}, got {got}")
    kind = kinds[0]
    vnode, field_name = f.items[kind][1], f.dotted(kind)
    values: dict[str, Any] = {}
    if kind == "builtin":
        name = _str()(vnode, field_name)
        path = WORKLOADS_DIR / f"{name}.py"
        if not re.fullmatch(r"[A-Za-z]\w*", name) or not _is_file(path):
            names = builtin_names()
            raise vnode.loc.error(field_name, f"expected a built-in workload ({', '.join(names) or 'none found'}),"
                                              f" got {_got(vnode)}{_suggest(name, names)}")
        values.update(builtin=name, script_path=str(path))
    elif kind == "script":
        rel = _str()(vnode, field_name)
        path = _path_value(vnode, field_name, base)
        if not rel or not _is_file(path):
            raise vnode.loc.error(field_name, f"file not found: {path}")
        values.update(script=rel, script_path=str(path))
    elif kind == "module":
        mod = _str()(vnode, field_name)
        if not _MODULE_RE.match(mod):
            raise _fail(vnode, field_name, "a module name like pkg.train")
        values["module"] = mod
    else:
        values["command"] = _argv(nonempty=True)(vnode, field_name)
    args = f.typed("args", _argv(nonempty=False))
    return Workload(args=args, python=_interpreter(f, base), python_from=_interpreter_from(f), **values)


def _interpreter_from(f: _Fields) -> str:
    """Where the workload's interpreter was named (a preflight problem with it says so)."""
    for key in ("python", "venv"):
        node = f.node(key)
        if node is not None:
            where = node.loc.error(None, "").where
            return f"{where}: field '{f.dotted(key)}'" if where else f"field '{f.dotted(key)}'"
    return ENV if os.environ.get(ENV) else ""
