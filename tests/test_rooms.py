"""The house's rules, read from the code: the pure rooms do no I/O, and no import circle exists anywhere."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.any_python

ROOT = Path(__file__).resolve().parent.parent
# The rooms whose modules decide from what they are given: no process, file, socket or thread of their own.
PURE = ("runners/judge", "runners/evidence", "runners/events.py")
# The rooms (and the run loops) that do I/O: a pure module that imports one of them does I/O through it.
IO_ROOMS = ("ddptui.runners.edge", "ddptui.runners.launch", "ddptui.runners.attach", "ddptui.runners.session",
            "ddptui.runners.run_loop")
IO_MODULES = {"subprocess", "psutil", "socket", "select", "selectors", "threading", "concurrent", "shutil", "fcntl",
              "pty", "asyncio", "urllib", "http", "multiprocessing", "ctypes", "linecache", "tempfile", "glob"}
IO_CALLS = {("os", "kill"), ("os", "killpg"), ("os", "open"), ("os", "read"), ("os", "write"), ("os", "waitpid"),
            ("os", "listdir"), ("os", "scandir"), ("os", "readlink"), ("os", "stat"), ("os", "remove"),
            ("os", "unlink"), ("os", "makedirs"), ("os", "mkdir"), ("os", "replace"), ("os", "rename"),
            ("signal", "signal"), ("signal", "pthread_kill"), ("os", "pidfd_open"), ("os", "getloadavg")}
IO_METHODS = {"read_text", "write_text", "read_bytes", "write_bytes", "mkdir", "unlink", "iterdir", "glob", "exists",
              "is_file", "is_dir", "stat", "open"}
SHIPPED = ("runners", "tui")
RANK_SIDE = ("runners/inject", "runners/workloads")  # run in the ranks' interpreter, not in ddptui


def modules(*places: str) -> dict[str, Path]:
    """Dotted name -> file of every module under the places (files or folders of the repository)."""
    out = {}
    for place in places:
        p = ROOT / place
        for f in ([p] if p.is_file() else sorted(p.rglob("*.py"))):
            rel = f.relative_to(ROOT)
            if any(str(rel).startswith(r) for r in RANK_SIDE):
                continue
            parts = list(rel.with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(["ddptui", *parts])] = f
    return out


def _type_only(tree: ast.Module) -> set[int]:
    """Line numbers of the imports under `if TYPE_CHECKING:` (names for annotations, never run)."""
    lines = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.If) and getattr(n.test, "id", getattr(n.test, "attr", "")) == "TYPE_CHECKING":
            lines |= {m.lineno for b in n.body for m in ast.walk(b) if isinstance(m, (ast.Import, ast.ImportFrom))}
    return lines


def imports(name: str, path: Path, known: dict[str, Path]) -> list[tuple[str, int, bool]]:
    """(module, line, inside a function) of each import the module runs, wherever it stands; `from pkg import mod`
    counts as importing pkg.mod."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skip = _type_only(tree)
    inner = {m.lineno for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
             for m in ast.walk(f) if isinstance(m, (ast.Import, ast.ImportFrom))}
    out = []
    for n in ast.walk(tree):
        if n.lineno in skip if isinstance(n, (ast.Import, ast.ImportFrom)) else True:
            continue
        if isinstance(n, ast.Import):
            out += [(a.name, n.lineno, n.lineno in inner) for a in n.names]
            continue
        base = n.module or ""
        if n.level:
            pkg = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
            base = ".".join(pkg[:len(pkg) - n.level + 1] + ([base] if base else []))
        for a in n.names:
            sub = f"{base}.{a.name}"
            out.append((sub if sub in known else base, n.lineno, n.lineno in inner))
    return out


def test_the_pure_rooms_do_no_io():
    """judge/, evidence/ and the events import no process, file, socket or thread module, call no os.kill-style
    function, read or write no file, and import nothing from the rooms that do."""
    known = modules(*SHIPPED)
    bad = []
    for name, path in modules(*PURE).items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        where = path.relative_to(ROOT)
        for mod, line, _ in imports(name, path, known):
            if mod.split(".")[0] in IO_MODULES or mod.startswith(IO_ROOMS) or mod.split(".")[:2] == ["ddptui", "tui"]:
                bad.append(f"{where}:{line} imports {mod}")
        for n in ast.walk(tree):
            if not isinstance(n, ast.Call):
                continue
            f = n.func
            if isinstance(f, ast.Name) and f.id == "open":
                bad.append(f"{where}:{n.lineno} calls open()")
            elif isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and (f.value.id, f.attr) in IO_CALLS:
                bad.append(f"{where}:{n.lineno} calls {f.value.id}.{f.attr}()")
            elif isinstance(f, ast.Attribute) and f.attr in IO_METHODS and not isinstance(f.value, ast.Name | ast.Constant):
                bad.append(f"{where}:{n.lineno} calls .{f.attr}()")
            elif isinstance(f, ast.Attribute) and f.attr in IO_METHODS and isinstance(f.value, ast.Name) \
                    and f.value.id not in ("re", "self", "s", "t"):
                bad.append(f"{where}:{n.lineno} calls {f.value.id}.{f.attr}()")
    assert not bad, "\n".join(bad)


@pytest.mark.timeout(60)
def test_importing_the_pure_rooms_loads_no_io_module():
    """What the pure rooms import, at any depth, as Python loads it: none of the I/O modules or rooms."""
    names = sorted(modules(*PURE))
    code = ("import importlib, sys\nbefore = set(sys.modules)\n"
            f"for n in {names!r}:\n    importlib.import_module(n)\n"
            "print(sorted(m for m in set(sys.modules) - before))")
    p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=50)
    assert p.returncode == 0, p.stderr
    loaded = eval(p.stdout.strip().splitlines()[-1])
    bad = [m for m in loaded if m.split(".")[0] in IO_MODULES - {"linecache", "tempfile", "glob"}
           or m.startswith(IO_ROOMS) or m.startswith("ddptui.tui")]
    assert not bad, bad


def test_evidence_never_reaches_up_to_the_judge():
    """The rules are the floor the judge stands on: evidence/ imports no part of judge/."""
    known = modules(*SHIPPED)
    bad = [f"{path.relative_to(ROOT)}:{line} imports {mod}" for name, path in modules("runners/evidence").items()
           for mod, line, _ in imports(name, path, known) if mod.startswith("ddptui.runners.judge")]
    assert not bad, "\n".join(bad)


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan), each sorted."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1 or v in graph.get(v, ()):
                out.append(sorted(group))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_circles_are_found():
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _circles({"a": {"b"}, "b": set()}) == []


def test_no_import_circle_anywhere():
    """No two modules of runners/ or tui/ import each other, directly or round a longer circle, counting the imports
    placed inside functions too (a circle hidden that way is still a circle)."""
    known = modules(*SHIPPED)
    graph = {n: set() for n in known}
    for name, path in known.items():
        for mod, _, _ in imports(name, path, known):
            if mod in known and mod != name and not name.startswith(mod + "."):
                graph[name].add(mod)
    assert not _circles(graph), _circles(graph)
