"""YAML profiles → frozen, validated dataclasses; every error names file:line:column and the field."""
from __future__ import annotations

import json
import math
import os
import re
import shlex
import shutil
import stat
import sys
from collections.abc import Callable, Sequence
from dataclasses import MISSING, asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from ..workloads import _faults
from . import srun_argv, torchrun_argv
from .rank_python import ENV, default_python

RUNNERS = ("torchrun", "env", "xla", "mirage", "slurm")
BACKENDS = ("gloo", "nccl", "xla", "auto")
DEVICES = ("cpu", "cuda", "xla", "auto")
ON_STALL = ("wait", "dump", "stop")
FAULT_KINDS = _faults.KINDS  # the rank side's table: the one place the kinds and their seconds are written
FAULT_SECONDS = _faults.DEFAULT_SECONDS
PJRT_DEVICES = ("CPU", "TPU", "CUDA")
MIRAGE_INNER = ("torchrun", "env")
WORKLOAD_KINDS = ("builtin", "script", "module", "command")
RDZV_BACKENDS = ("static", "c10d")
SLURM_LAUNCH = ("srun", "torchrun")
SLURM_SUBMIT = ("auto", "sbatch", "step")

TOP_KEYS = ("name", "description", "runner", "nproc", "nnodes", "workload", "env", "backend", "device",
            "steps", "seed", "stall_after", "startup_grace", "agent_exit_grace", "on_stall", "timeout", "master_addr",
            "master_port", "replica_check", "fault", "mirage", "xla", "max_world_size", "rdzv_backend",
            "rdzv_endpoint", "rdzv_id", "local_addr", "slurm", "flight_recorder")
WORKLOAD_KEYS = WORKLOAD_KINDS + ("args", "python", "venv")
FAULT_KEYS = ("kind", "rank", "step", "seconds")
MIRAGE_KEYS = ("command", "workspace", "profile", "gpus_per_node", "num_nodes", "in_process", "env", "inner",
               "require_rocm")
XLA_KEYS = ("pjrt_device", "num_devices", "async_client", "thread_pool_size", "cache_dir")
SLURM_KEYS = ("launch", "submit", "partition", "time", "account", "port", "sbatch_args", "srun_args")
RDZV_KEYS = ("rdzv_backend", "rdzv_endpoint", "rdzv_id", "local_addr")

WORKLOADS_DIR = Path(__file__).resolve().parent.parent / "workloads"
ADHOC_SOURCE = "<command line>"
_MAX_NODES = 20000  # aliases can make a small file expand enormously
_MAX_DEPTH = 64
# PyYAML composes ~35k nodes/s here: a profile is a few hundred bytes, so 64 KiB and 20,000 nodes bound
# the parse to well under a second whatever the file holds.
MAX_PROFILE_BYTES = 64 * 1024
# A run's folder is `<YYYYmmdd-HHMMSS>-<name>[-N]` (runners/edge/record.py: never more bytes than the name) and a file name
# holds 255 bytes (NAME_MAX); its Slurm job is named `ddptui-<folder>`. 200 leaves room for both.
MAX_NAME_BYTES = 200
# Ranks all run on this machine (a Slurm job's: those of one node): past 4 per core (and 64 in all) a world size is
# almost surely a typo.
# `max_world_size` raises the bound for a deliberate big run, never past WORLD_CEILING.
WORLD_PER_CPU, WORLD_FLOOR, WORLD_CEILING = 4, 64, 65536


def default_max_world_size(cpus: int | None = None) -> int:
    """The world size a profile may ask for without `max_world_size`: 4 ranks per CPU core, at least 64."""
    cpus = os.cpu_count() if cpus is None else cpus
    return max(WORLD_FLOOR, WORLD_PER_CPU * (cpus or 1))


class ProfileError(Exception):
    """A profile problem, located: ``str(err)`` is one line ``where: field 'x': message``."""

    def __init__(self, file: str | None, line: int | None, col: int | None, field: str | None,
                 message: str, *, show_field: bool = True):
        self.file, self.line, self.col, self.field = file, line, col, field
        self.message = " ".join(message.split())  # always one line
        self._show_field = show_field and field is not None
        super().__init__(str(self))

    @property
    def where(self) -> str:
        if self.file is None:
            return ""
        return f"{self.file}:{self.line}:{self.col}" if self.line is not None else self.file

    def __str__(self) -> str:
        body = f"field '{self.field}': {self.message}" if self._show_field else self.message
        return f"{self.where}: {body}" if self.where else body


@dataclass(frozen=True)
class Workload:
    builtin: str | None = None
    script: str | None = None
    module: str | None = None
    command: tuple[str, ...] | None = None
    args: tuple[str, ...] = ()
    python: str = sys.executable  # absolute interpreter path
    script_path: str | None = None  # absolute path of the file to run (builtin, script)
    # who named `python`, as an error names it: "FILE:LINE:COL: field 'workload.python'" (or workload.venv),
    # "DDPTUI_PYTHON", or "" (ddptui's own interpreter)
    python_from: str = ""


@dataclass(frozen=True)
class Fault:
    kind: str
    rank: int = 0
    step: int = 0
    seconds: float = 0.0

    def spec(self) -> str:
        """The DDP_FAULT value: kind:rank:step:seconds, as the ranks' _faults.parse reads it."""
        return _faults.spec(self.kind, self.rank, self.step, self.seconds)


@dataclass(frozen=True)
class MirageOptions:
    command: tuple[str, ...] = ("mirage",)
    workspace: str = ""
    profile: str = "mi350x"
    gpus_per_node: int = 2
    num_nodes: int = 1
    in_process: bool = False
    require_rocm: bool = True  # preflight checks the venv for the ROCm SDK (stand-ins for tests set false)
    env: dict[str, str] = field(default_factory=dict)  # passed as --env K=V
    inner: str = "torchrun"  # what mirage runs: torchrun, or the rank program itself (env)

    @property
    def via_cargo(self) -> bool:
        """mirage run from its workspace build (`cargo run ... --`), not an installed binary."""
        return bool(self.command) and os.path.basename(self.command[0]) == "cargo"


@dataclass(frozen=True)
class XlaOptions:
    pjrt_device: str = "CPU"
    num_devices: int = 2
    async_client: bool = False
    thread_pool_size: int | None = None
    cache_dir: str | None = None


@dataclass(frozen=True)
class SlurmOptions:
    launch: str = "srun"  # srun: one task per rank; torchrun: one torchrun agent per node
    submit: str = "auto"  # auto: a step inside an allocation (SLURM_JOB_ID set), else a job through sbatch
    partition: str | None = None
    time: str | None = None  # Slurm's time limit as written: minutes, MM:SS, HH:MM:SS, D-HH[:MM[:SS]]
    account: str | None = None
    port: int | str = "auto"  # the ranks' rendezvous port on the first node; auto: 29500 + job id % 1000
    sbatch_args: tuple[str, ...] = ()
    srun_args: tuple[str, ...] = ()


@dataclass(frozen=True)
class Profile:
    name: str
    workload: Workload
    source: str
    description: str = ""
    runner: str = "torchrun"
    nproc: int = 2
    nnodes: int = 1
    env: dict[str, str] = field(default_factory=dict)
    backend: str = "auto"
    device: str = "cpu"
    steps: int | None = None
    seed: int = 0
    stall_after: float | str = "auto"
    startup_grace: float = 60.0
    agent_exit_grace: float = 15.0  # a node's agent still running this long after the run failed: its node is lost
    on_stall: str = "stop"
    timeout: float = 0.0
    master_addr: str = "127.0.0.1"
    master_port: int | str = "auto"
    replica_check: bool = True
    fault: Fault | None = None
    mirage: MirageOptions = field(default_factory=MirageOptions)
    xla: XlaOptions = field(default_factory=XlaOptions)
    max_world_size: int | None = None  # None: default_max_world_size() of the machine that loaded it
    # torchrun's rendezvous across agents (its own flag names): static, the agents ddptui starts knowing their node
    # ranks, or c10d; endpoint None: master_addr and the run's port; id None: the run directory's name
    rdzv_backend: str = "static"
    rdzv_endpoint: str | None = None
    rdzv_id: str | None = None
    local_addr: str | None = None  # torchrun --local-addr: the address the agents give of their own node
    slurm: SlurmOptions = field(default_factory=SlurmOptions)
    # PyTorch's Flight Recorder in the ranks (not XLA) and a debug server per rank on a unix socket (runners/launch/fr_env.py)
    flight_recorder: bool = True

    @property
    def world_size(self) -> int:
        return self.nproc * self.nnodes

    @property
    def rendezvous(self) -> tuple[str, int | str]:
        """Where the ranks (or torchrun's c10d agents) meet on this machine: (host, port or 'auto')."""
        if self.rdzv_endpoint is not None:
            return split_endpoint(self.rdzv_endpoint)
        return self.master_addr, self.master_port

    def to_json(self) -> dict[str, Any]:
        d = json.loads(json.dumps(asdict(self)))  # tuples → lists
        d["world_size"] = self.world_size
        return d

    def rank_env(self) -> dict[str, str]:
        """What every rank gets from the profile: the built-in workloads' DDP_* knobs, then its own env (which wins).

        A user's script, module or command gets only the profile's env: it may read DDP_BACKEND & co. itself
        with its own defaults, which ours must not replace.
        """
        out = {}
        if self.workload.builtin is not None:
            out = {"DDP_BACKEND": self.backend, "DDP_DEVICE": self.device, "DDP_SEED": str(self.seed)}
            if self.steps is not None:
                out["DDP_STEPS"] = str(self.steps)
            if self.fault is not None:
                out["DDP_FAULT"] = self.fault.spec()
        out.update(self.env)
        return out


def default(name: str, of: type = Profile) -> Any:
    """The default a field of Profile (or of another of these dataclasses) declares: the one place it is written."""
    f = next(f for f in fields(of) if f.name == name)
    return f.default_factory() if f.default is MISSING else f.default  # type: ignore[misc]


# ---------------------------------------------------------------- located tree

@dataclass(frozen=True)
class _Loc:
    file: str
    line: int | None = None
    col: int | None = None

    def error(self, field: str | None, message: str, *, show_field: bool = True) -> ProfileError:
        return ProfileError(self.file, self.line, self.col, field, message, show_field=show_field)


@dataclass
class _Node:
    """A YAML value with where it came from. map: {key: (key_loc, node)}; seq: [node]; scalar: value + text."""

    kind: str  # "map" | "seq" | "scalar"
    value: Any
    loc: _Loc
    text: str = ""  # the scalar as written (after unquoting)


def _yaml_error_to_profile(exc: Exception, file: str, text: str) -> ProfileError:
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc)
    if mark is not None:
        msg = f"invalid YAML: {problem}"
        ctx, cmark = getattr(exc, "context", None), getattr(exc, "context_mark", None)
        if ctx and cmark is not None:
            msg += f" ({ctx} at line {cmark.line + 1}, column {cmark.column + 1})"
        return ProfileError(file, mark.line + 1, mark.column + 1, None, msg)
    pos = getattr(exc, "position", None)  # ReaderError: a bad character
    if isinstance(pos, int):
        line = text.count("\n", 0, pos) + 1
        col = pos - (text.rfind("\n", 0, pos) + 1) + 1
        return ProfileError(file, line, col, None, f"invalid YAML: {getattr(exc, 'reason', exc)}"
                            f" (character {getattr(exc, 'character', '?')!r})")
    return ProfileError(file, 1, 1, None, f"invalid YAML: {problem}")


class _Converter:
    """PyYAML composed nodes → _Node, constructing scalars with SafeLoader's rules."""

    def __init__(self, locate: Callable[[Any], _Loc]):
        import yaml

        self.yaml = yaml
        self.ctor = yaml.constructor.SafeConstructor()
        self.locate = locate
        self.count = 0
        self.active: set[int] = set()

    def convert(self, y: Any, path: str, depth: int = 0) -> _Node:
        yaml = self.yaml
        loc = self.locate(y.start_mark)
        self.count += 1
        if self.count > _MAX_NODES or depth > _MAX_DEPTH:
            raise loc.error(None, "profile too large or too deeply nested")
        if isinstance(y, yaml.ScalarNode):
            try:
                value = self.ctor.construct_object(y, deep=True)
            except Exception as exc:  # bad !!int, !!binary, unknown tag, ... all land here
                problem = getattr(exc, "problem", None) or str(exc)
                raise loc.error(path or None, f"cannot read value: {problem}") from None
            return _Node("scalar", value, loc, y.value)
        self._plain_tag(y, path)
        if id(y) in self.active:
            raise loc.error(path or None, "recursive alias")
        self.active.add(id(y))
        try:
            if isinstance(y, yaml.SequenceNode):
                return _Node("seq", [self.convert(c, f"{path}[{i}]", depth + 1) for i, c in enumerate(y.value)], loc)
            return self._mapping(y, path, loc, depth)
        finally:
            self.active.discard(id(y))

    def _plain_tag(self, y: Any, path: str) -> None:
        """Scalars with an unknown tag fail to construct; a tagged mapping or list must fail as loudly."""
        seq = isinstance(y, self.yaml.SequenceNode)
        plain = self.yaml.resolver.BaseResolver.DEFAULT_SEQUENCE_TAG if seq else \
            self.yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG
        if y.tag != plain:
            raise self.locate(y.start_mark).error(
                path or None, f"cannot read value: unsupported tag '{y.tag}' on a {'list' if seq else 'mapping'}")

    def _merge_sources(self, y: Any, path: str, seen: set[int]) -> None:
        """`<<` sources vanish into their mapping when merged: check their tags (and their own sources') first."""
        yaml = self.yaml
        for k, v in y.value:
            if k.tag != "tag:yaml.org,2002:merge" or id(v) in seen:
                continue
            seen.add(id(v))
            for src in (v.value if isinstance(v, yaml.SequenceNode) else []) + [v]:
                if isinstance(src, (yaml.MappingNode, yaml.SequenceNode)):
                    self._plain_tag(src, path)
                if isinstance(src, yaml.MappingNode):
                    self._merge_sources(src, path, seen)

    def _key(self, k: Any) -> None:
        try:  # keys are read as written; constructing them only rejects what a value would reject
            self.ctor.construct_object(k, deep=True)
        except Exception as exc:
            problem = getattr(exc, "problem", None) or str(exc)
            raise self.locate(k.start_mark).error(None, f"cannot read field name: {problem}") from None

    def _mapping(self, y: Any, path: str, loc: _Loc, depth: int) -> _Node:
        yaml = self.yaml
        own = {id(k) for k, _ in y.value if k.tag != "tag:yaml.org,2002:merge"}
        self._merge_sources(y, path, set())
        try:
            self.ctor.flatten_mapping(y)  # resolve `<<` merge keys
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None) or y.start_mark
            raise self.locate(mark).error(None, f"invalid merge: {getattr(exc, 'problem', exc)}") from None
        out: dict[str, tuple[_Loc, _Node]] = {}
        from_merge: set[str] = set()
        for k, v in y.value:
            kloc = self.locate(k.start_mark)
            if not isinstance(k, yaml.ScalarNode):
                got = "a list" if isinstance(k, yaml.SequenceNode) else "a mapping"
                raise kloc.error(None, f"expected a field name, got {got}")
            self._key(k)
            name = k.value
            dotted = f"{path}.{name}" if path else name
            if name in out and name not in from_merge and id(k) in own:
                raise kloc.error(dotted, f"duplicate field '{dotted}' (first at line {out[name][0].line})",
                                 show_field=False)
            out[name] = (kloc, self.convert(v, dotted, depth + 1))
            (from_merge.discard if id(k) in own else from_merge.add)(name)
        return _Node("map", out, loc)


class _OverBound(Exception):
    """The YAML is past a bound (nodes, nesting): stop reading it there."""

    def __init__(self, mark: Any, message: str):
        super().__init__(message)
        self.mark, self.message = mark, message


_LOADER: Any = None


def _compose(text: str) -> Any:
    """SafeLoader's node graph, composing at most _MAX_NODES nodes, _MAX_DEPTH deep (aliases are not expanded here)."""
    global _LOADER
    if _LOADER is None:
        import yaml

        class BoundedLoader(yaml.SafeLoader):
            composed = depth = 0

            def compose_node(self, parent: Any, index: Any) -> Any:
                self.composed += 1
                if self.composed > _MAX_NODES:
                    raise _OverBound(self.peek_event().start_mark, f"too large: more than {_MAX_NODES} YAML values")
                self.depth += 1
                try:
                    if self.depth > _MAX_DEPTH + 1:
                        raise _OverBound(self.peek_event().start_mark,
                                         f"too deeply nested: more than {_MAX_DEPTH} levels")
                    return super().compose_node(parent, index)
                finally:
                    self.depth -= 1

            def fetch_flow_collection_start(self, TokenClass: Any) -> None:
                # the scanner reads a run of '[' / '{' ahead of the composer, in time quadratic in its length
                if self.flow_level >= _MAX_DEPTH:
                    raise _OverBound(self.get_mark(), f"too deeply nested: more than {_MAX_DEPTH} levels")
                super().fetch_flow_collection_start(TokenClass)

        _LOADER = BoundedLoader
    loader = _LOADER(text)  # the reader already rejects unprintable characters here
    try:
        return loader.get_single_node()
    finally:
        loader.dispose()


def _parse_text(text: str, file: str) -> _Node | None:
    import yaml

    try:
        root = _compose(text)
    except yaml.YAMLError as exc:
        raise _yaml_error_to_profile(exc, file, text) from None
    except _OverBound as exc:
        raise ProfileError(file, exc.mark.line + 1, exc.mark.column + 1, None,
                           f"profile {exc.message}") from None
    except RecursionError:
        raise ProfileError(file, 1, 1, None, "profile too deeply nested") from None
    if root is None:
        return None
    conv = _Converter(lambda m: _Loc(file, m.line + 1, m.column + 1))
    try:
        return conv.convert(root, "")
    except RecursionError:
        raise ProfileError(file, 1, 1, None, "profile too deeply nested") from None


# ---------------------------------------------------------------- overrides

def _apply_override(root: _Node, item: str) -> None:
    import yaml

    if len(item) > MAX_PROFILE_BYTES:
        raise _Loc(f"--set {item[:40]}...").error(None, f"override too large: {len(item)} characters,"
                                                         f" at most {MAX_PROFILE_BYTES}")
    loc = _Loc(f"--set {item}")
    key, sep, raw = item.partition("=")
    parts = key.strip().split(".")
    if not sep or not all(p.strip() for p in parts):
        raise loc.error(None, "expected key=value")
    parts = [p.strip() for p in parts]
    try:
        y = _compose(raw)
        value = _Node("scalar", None, loc, "") if y is None else _Converter(lambda m: loc).convert(y, key)
    except _OverBound as exc:
        raise loc.error(key, f"value {exc.message}") from None
    except yaml.YAMLError as exc:
        problem = getattr(exc, "problem", None) or getattr(exc, "reason", None) or exc
        raise loc.error(key, f"invalid YAML value: {problem}") from None
    except RecursionError:
        raise loc.error(key, "value too deeply nested") from None
    node = root
    for i, part in enumerate(parts[:-1]):
        entry = node.value.get(part)
        if entry is None or (entry[1].kind == "scalar" and entry[1].value is None):
            entry = (loc, _Node("map", {}, loc))
            node.value[part] = entry
        elif entry[1].kind != "map":
            dotted = ".".join(parts[: i + 1])
            raise loc.error(dotted, f"expected a mapping to set '{parts[i + 1]}' in, got {_got(entry[1])}")
        node = entry[1]
    last = parts[-1]
    if parts[:-1] == ["workload"] and last in WORKLOAD_KINDS:
        for other in WORKLOAD_KINDS:  # choosing a workload kind replaces the file's choice
            if other != last:
                node.value.pop(other, None)
    node.value[last] = (loc, value)


# ---------------------------------------------------------------- validation helpers

def _got(node: _Node) -> str:
    if node.kind == "seq":
        return "a list"
    if node.kind == "map":
        return "a mapping"
    v = node.value
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        s = repr(v)
        return s if len(s) <= 40 else s[:37] + "..."
    if isinstance(v, str):
        return repr(v) if len(v) <= 50 else repr(v[:47]) + "..."
    return f"a {type(v).__name__}"


def _closest(word: str, choices: Sequence[str], cutoff: float = 0.6) -> str | None:
    import difflib

    for choice in choices:
        if choice.casefold() == word.casefold():
            return choice
    close = difflib.get_close_matches(word, choices, n=1, cutoff=cutoff)
    return close[0] if close else None


def _suggest(word: str, choices: Sequence[str], cutoff: float = 0.6) -> str:
    close = _closest(word, choices, cutoff)
    return f" (did you mean '{close}'?)" if close else ""


class _Fields:
    """One mapping under validation: rejects unknown keys, hands out typed values located at their node."""

    def __init__(self, node: _Node | None, path: str, allowed: Sequence[str], where: _Loc, of: type | None = None):
        self.path, self.of = path, of  # of: the dataclass whose field defaults typed() applies
        if node is None or (node.kind == "scalar" and node.value is None):
            self.items: dict[str, tuple[_Loc, _Node]] = {}
            self.loc = node.loc if node is not None else where
            return
        if node.kind != "map":
            raise node.loc.error(path or None, f"expected a mapping, got {_got(node)}")
        self.items, self.loc = node.value, node.loc
        for name, (kloc, _) in self.items.items():
            if name not in allowed:
                full = self.dotted(name)
                close = _closest(name, allowed)
                hint = f" (did you mean '{self.dotted(close)}'?)" if close else ""
                raise kloc.error(full, f"unknown field '{full}'{hint}", show_field=False)

    def dotted(self, name: str) -> str:
        return f"{self.path}.{name}" if self.path else name

    def node(self, name: str) -> _Node | None:
        entry = self.items.get(name)
        return entry[1] if entry else None

    def get(self, name: str, default: Any, check: Callable[[_Node, str], Any]) -> Any:
        node = self.node(name)
        return default if node is None else check(node, self.dotted(name))

    def typed(self, name: str, check: Callable[[_Node, str], Any]) -> Any:
        """The value given, else the default that the field of the same name in `of` declares."""
        assert self.of is not None
        return self.get(name, default(name, self.of), check)


def _fail(node: _Node, field: str, expected: str) -> ProfileError:
    return node.loc.error(field, f"expected {expected}, got {_got(node)}")


def _is_int(node: _Node) -> bool:
    return node.kind == "scalar" and isinstance(node.value, int) and not isinstance(node.value, bool)


def _is_num(node: _Node) -> bool:
    if node.kind != "scalar" or not isinstance(node.value, (int, float)) or isinstance(node.value, bool):
        return False
    try:
        return math.isfinite(float(node.value))  # an int past 1.8e308 has no float
    except OverflowError:
        return False


def _range_text(lo: int | None, hi: int | None) -> str:
    if lo is not None and hi is not None:
        return f"an integer in {lo}..{hi}"
    if lo is not None:
        return f"an integer >= {lo}"
    return "an integer"


def _int(lo: int | None = None, hi: int | None = None, *, nullable: bool = False, auto: bool = False):
    expected = _range_text(lo, hi) + (" or null" if nullable else "") + (" or 'auto'" if auto else "")

    def check(node: _Node, field: str) -> Any:
        if nullable and node.kind == "scalar" and node.value is None:
            return None
        if auto and node.kind == "scalar" and node.value == "auto":
            return "auto"
        if not _is_int(node) or (lo is not None and node.value < lo) or (hi is not None and node.value > hi):
            raise _fail(node, field, expected)
        return node.value
    return check


def _num(lo: float, *, strict: bool, auto: bool = False):
    expected = f"a number {'>' if strict else '>='} {lo:g}" + (" or 'auto'" if auto else "")

    def check(node: _Node, field: str) -> Any:
        if auto and node.kind == "scalar" and node.value == "auto":
            return "auto"
        if not _is_num(node) or node.value < lo or (strict and node.value == lo):
            raise _fail(node, field, expected)
        return float(node.value)
    return check


def _bool(node: _Node, field: str) -> bool:
    if node.kind != "scalar" or not isinstance(node.value, bool):
        raise _fail(node, field, "true or false")
    return node.value


def _str(nullable: bool = False):
    def check(node: _Node, field: str) -> Any:
        if nullable and node.kind == "scalar" and node.value is None:
            return None
        if node.kind != "scalar" or not isinstance(node.value, str):
            raise _fail(node, field, "a string" + (" or null" if nullable else ""))
        if "\x00" in node.value:
            raise node.loc.error(field, "NUL characters are not allowed")
        return node.value
    return check


def _enum(choices: Sequence[str]):
    def check(node: _Node, field: str) -> str:
        if node.kind == "scalar" and isinstance(node.value, str) and node.value in choices:
            return node.value
        # short enum words look alike (gpu/cpu), so only near misses get a suggestion
        hint = _suggest(node.value, choices, 0.75) if node.kind == "scalar" and isinstance(node.value, str) else ""
        raise node.loc.error(field, f"expected one of {', '.join(choices)}, got {_got(node)}{hint}")
    return check


def _scalar_text(node: _Node, field: str, what: str) -> str:
    """A scalar as the user wrote it (env values, argv words): 010 stays '010', true stays 'true'."""
    if node.kind != "scalar" or node.value is None:
        raise _fail(node, field, what)
    text = node.value if isinstance(node.value, str) else node.text
    if "\x00" in text:
        raise node.loc.error(field, "NUL characters are not allowed")
    return text


def _argv(nonempty: bool):
    expected = "a non-empty list of strings" if nonempty else "a list of strings"

    def check(node: _Node, field: str) -> tuple[str, ...]:
        if node.kind == "scalar" and isinstance(node.value, str):  # a shell-like string is split
            try:
                words = shlex.split(node.value)
            except ValueError as exc:
                raise node.loc.error(field, f"cannot split into words: {exc}") from None
        elif node.kind == "seq":
            words = [_scalar_text(c, f"{field}[{i}]", "a string") for i, c in enumerate(node.value)]
        else:
            raise _fail(node, field, expected)
        if nonempty and not words:
            raise _fail(node, field, expected)
        return tuple(words)
    return check


def _env_map(node: _Node, field: str) -> dict[str, str]:
    if node.kind == "scalar" and node.value is None:
        return {}
    if node.kind != "map":
        raise _fail(node, field, "a mapping of NAME: value")
    out = {}
    for name, (kloc, child) in node.value.items():
        if not name or "=" in name or "\x00" in name:
            raise kloc.error(field, f"invalid variable name {name!r}")
        out[name] = _scalar_text(child, f"{field}.{name}", "a string (or number/boolean)")
    return out


# ---------------------------------------------------------------- the profile

def _is_file(path: Path) -> bool:
    try:
        return path.is_file()
    except (OSError, ValueError):  # name too long and the like: not a usable file either
        return False


def _is_dir(path: Path) -> bool:
    try:
        return path.is_dir()
    except (OSError, ValueError):
        return False


def _path_value(node: _Node, field: str, base: Path) -> Path:
    return Path(os.path.abspath(base / os.path.expanduser(_str()(node, field))))


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


def _fault(node: _Node | None, where: _Loc, world: int, nproc: int, nnodes: int) -> Fault | None:
    if node is None or (node.kind == "scalar" and node.value is None):
        return None
    f = _Fields(node, "fault", FAULT_KEYS, where, Fault)
    kind_node = f.node("kind")
    if kind_node is None:
        raise f.loc.error("fault.kind", f"missing, expected one of {', '.join(FAULT_KINDS)}")
    kind = _enum(FAULT_KINDS)(kind_node, "fault.kind")
    rank = f.typed("rank", _int(0))
    if rank >= world:
        rnode = f.node("rank")
        assert rnode is not None  # the default 0 is always < world
        raise rnode.loc.error("fault.rank", f"expected an integer in 0..{world - 1} (world size"
                                            f" {nproc}*{nnodes}), got {rank}")
    return Fault(kind=kind, rank=rank, step=f.typed("step", _int(0)),
                 seconds=f.get("seconds", FAULT_SECONDS[kind], _num(0, strict=False)))


def _mirage(node: _Node | None, where: _Loc, base: Path, nproc: int, nnodes: int) -> MirageOptions:
    f = _Fields(node, "mirage", MIRAGE_KEYS, where, MirageOptions)
    ws = f.node("workspace")
    workspace = str(_path_value(ws, "mirage.workspace", base)) if ws is not None else str(base)
    return MirageOptions(
        command=f.typed("command", _argv(nonempty=True)),
        workspace=workspace,
        profile=f.typed("profile", _str()),
        gpus_per_node=f.get("gpus_per_node", nproc, _int(1)),
        num_nodes=f.get("num_nodes", nnodes, _int(1)),
        in_process=f.typed("in_process", _bool),
        env=f.typed("env", _env_map),
        inner=f.typed("inner", _enum(MIRAGE_INNER)),
        require_rocm=f.typed("require_rocm", _bool),
    )


def _xla(node: _Node | None, where: _Loc, base: Path, nproc: int) -> XlaOptions:
    f = _Fields(node, "xla", XLA_KEYS, where, XlaOptions)
    cache = f.node("cache_dir")
    cache_dir = None
    if cache is not None and _str(nullable=True)(cache, "xla.cache_dir") is not None:
        cache_dir = str(_path_value(cache, "xla.cache_dir", base))
    return XlaOptions(
        pjrt_device=f.typed("pjrt_device", _enum(PJRT_DEVICES)),
        num_devices=f.get("num_devices", nproc, _int(1)),
        async_client=f.typed("async_client", _bool),
        thread_pool_size=f.typed("thread_pool_size", _int(1, nullable=True)),
        cache_dir=cache_dir,
    )


# Slurm's --time formats; a bare number is minutes
_SLURM_TIME = re.compile(r"(\d+(:\d{1,2}){0,2}|\d+-\d+(:\d{1,2}){0,2}|UNLIMITED|INFINITE)\Z")
# what ddptui sets itself on the sbatch / srun command line, and from which field
_SBATCH_OWN = {("-N", "--nodes"): "nnodes", ("-n", "--ntasks"): "nproc x nnodes",
               ("--ntasks-per-node",): "nproc", ("-o", "--output"): "the run record (slurm/batch.out)",
               ("-e", "--error"): "the run record (slurm/batch.out)", ("-J", "--job-name"): "ddptui-<run dir name>",
               ("-W", "--wait"): "ddptui, to follow the job", ("--parsable",): "ddptui, to read the job id",
               ("-p", "--partition"): "slurm.partition", ("-t", "--time"): "slurm.time",
               ("-A", "--account"): "slurm.account"}
_SRUN_OWN = {("-N", "--nodes"): "nnodes", ("-n", "--ntasks"): "nproc x nnodes", ("--ntasks-per-node",): "nproc",
             ("-o", "--output"): "the run record (slurm/rank%t.out)", ("-e", "--error"): "the run record",
             ("-l", "--label"): "ddptui (lines are read from per-rank files)", ("-J", "--job-name"): "ddptui"}
# keys a Slurm user may reach for that are top-level fields here: one place says how many nodes and ranks
_SLURM_COUNT_KEYS = {"nodes": "nnodes", "ntasks_per_node": "nproc", "ntasks": "nproc and nnodes",
                     "nproc_per_node": "nproc", "nnodes": "nnodes", "nproc": "nproc"}


def sbatch_srun_conflict(words: Sequence[str], own: dict[tuple[str, ...], str]) -> str | None:
    """Why an extra sbatch/srun argument clashes with one ddptui sets itself, or None."""
    for word in words:
        for flags, source in own.items():
            for flag in flags:
                short_glued = len(flag) == 2 and word.startswith(flag) and len(word) > 2 and flag[1] != "-" \
                    and flag not in ("-l", "-W")
                if word == flag or word.startswith(flag + "=") or short_glued:
                    return f"{word!r}: ddptui sets {'/'.join(flags)} itself (from {source})"
    return None


def _slurm_time(node: _Node, field: str) -> str | None:
    if node.kind == "scalar" and node.value is None:
        return None
    text = _scalar_text(node, field, "a Slurm time limit")  # 10:00 is read as written, not as YAML's base 60
    if not _SLURM_TIME.match(text):
        raise _fail(node, field, "a Slurm time limit (minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS"
                                 " or UNLIMITED)")
    return text


def _slurm_args(own: dict[tuple[str, ...], str]):
    words_of = _argv(nonempty=False)

    def check(node: _Node, field: str) -> tuple[str, ...]:
        words = words_of(node, field)
        problem = sbatch_srun_conflict(words, own)
        if problem is not None:
            raise node.loc.error(field, problem)
        return words
    return check


def _slurm(node: _Node | None, where: _Loc) -> SlurmOptions:
    if node is not None and node.kind == "map":
        for key, (kloc, _) in node.value.items():
            if key in _SLURM_COUNT_KEYS:
                top = _SLURM_COUNT_KEYS[key]
                raise kloc.error(f"slurm.{key}", f"the counts are the top-level fields (nnodes: nodes, nproc: ranks"
                                                 f" per node), as for every runner: write {top} instead")
    f = _Fields(node, "slurm", SLURM_KEYS, where, SlurmOptions)
    nullable = _str(nullable=True)
    return SlurmOptions(
        launch=f.typed("launch", _enum(SLURM_LAUNCH)),
        submit=f.typed("submit", _enum(SLURM_SUBMIT)),
        partition=f.typed("partition", nullable),
        time=f.get("time", None, _slurm_time),
        account=f.typed("account", nullable),
        port=f.typed("port", _int(1, 65535, auto=True)),
        sbatch_args=f.typed("sbatch_args", _slurm_args(_SBATCH_OWN)),
        srun_args=f.typed("srun_args", _slurm_args(_SRUN_OWN)),
    )


def split_endpoint(text: str) -> tuple[str, int | str]:
    """'host:port' / 'host:auto' / 'host' / '[v6]:port' -> (host, port or 'auto'); ValueError says what is wrong."""
    host, port = text, "auto"
    if text.startswith("["):
        close = text.find("]")
        if close < 0:
            raise ValueError("an IPv6 address opened with '[' needs its ']'")
        host, rest = text[1:close], text[close + 1:]
        if rest:
            if not rest.startswith(":"):
                raise ValueError("expected ':port' after ']'")
            port = rest[1:]
    elif text.count(":") == 1:
        host, port = text.split(":")
    if not host or any(c.isspace() for c in host):
        raise ValueError("expected host:port, host:auto or host")
    if port == "auto":
        return host, "auto"
    if not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ValueError(f"port {port!r} is not in 1..65535 or auto")
    return host, int(port)


def _endpoint(node: _Node, field: str) -> str | None:
    if node.kind == "scalar" and node.value is None:
        return None
    text = _scalar_text(node, field, "host:port, host:auto or host")
    try:
        split_endpoint(text)
    except ValueError as exc:
        raise node.loc.error(field, f"{exc}, got {_got(node)}") from None
    return text


def _rdzv_id(node: _Node, field: str) -> str | None:
    if node.kind == "scalar" and node.value is None:
        return None
    text = _scalar_text(node, field, "a rendezvous id")
    if not text or any(c.isspace() for c in text):
        raise _fail(node, field, "a non-empty id without spaces")
    return text


def rdzv_problem(field: str, runner: str, wrapped_command: bool, backend: str) -> str | None:
    """Why a torchrun rendezvous field does not apply to this profile, or None."""
    if runner == "slurm":
        return (f"the slurm runner's torchrun agents meet by c10d at the job's first node with the job id as"
                f" rendezvous id (slurm.port sets the port); remove {field}")
    if runner != "torchrun":
        return f"{field} is torchrun's; the {runner} runner starts no torchrun agents"
    if wrapped_command:
        return f"the wrapped torchrun command chooses its own rendezvous: give it --{field.replace('_', '-')}"
    if backend == "static" and field in ("rdzv_endpoint", "rdzv_id"):
        return f"{field} is for rdzv_backend: c10d; the static rendezvous meets at master_addr:master_port"
    return None


def _check_rdzv(f: _Fields, profile: Profile) -> None:
    for name in RDZV_KEYS:
        node = f.node(name)
        if node is None or getattr(profile, name) is None or (name == "rdzv_backend" and profile.runner == "torchrun"
                                                               and not profile.workload.command):
            continue
        problem = rdzv_problem(name, profile.runner, bool(profile.workload.command), profile.rdzv_backend)
        if problem is None and name == "rdzv_endpoint":
            if f.node("master_addr") is not None or f.node("master_port") is not None:
                problem = "give the c10d endpoint either here or as master_addr/master_port, not both"
            else:
                problem = unbindable(profile.rendezvous[0])
        if problem is None and name == "local_addr":
            problem = unbindable(str(profile.local_addr))
        if problem is not None:
            raise node.loc.error(name, problem)


def _check_slurm(f: _Fields, profile: Profile, environ: Any = None) -> None:
    """The slurm block is the slurm runner's; its submit and launch must fit the workload and where ddptui runs."""
    node = f.node("slurm")
    given = node is not None and node.kind == "map" and node.value
    if profile.runner != "slurm":
        if given:
            raise node.loc.error("slurm", f"the slurm block is for runner: slurm (this profile's runner is"
                                          f" {profile.runner})")
        return
    s, cmd = profile.slurm, profile.workload.command
    environ = os.environ if environ is None else environ

    def at(key: str) -> _Loc:
        entry = node.value.get(key) if given else None
        return entry[1].loc if entry else (node.loc if node is not None else f.loc)
    if cmd and srun_argv.is_srun(cmd):
        if srun_argv.program_start(cmd) >= len(cmd):
            raise f.loc.error("workload.command", "the srun command line names no program to run")
        extra = [k for k in (node.value if given else {}) if k != "port"]
        if extra:
            raise at(extra[0]).error(f"slurm.{extra[0]}", "workload.command is an srun command line, which chooses"
                                                         " its own options; only slurm.port applies to it")
        return
    if cmd and torchrun_argv.launcher_end(cmd) is not None:
        raise f.loc.error("workload.command", "a torchrun command under the slurm runner: give the program as"
                                              " workload.script/module and set slurm.launch: torchrun (one agent"
                                              " per node)")
    if cmd and s.launch == "torchrun":
        raise at("launch").error("slurm.launch", "launch: torchrun starts workload.script/module under one agent"
                                                 " per node; a workload.command runs as each rank with launch: srun")
    if s.submit == "step" and not environ.get("SLURM_JOB_ID"):
        raise at("submit").error("slurm.submit", "step needs an allocation and SLURM_JOB_ID is not set: run ddptui"
                                                 " inside salloc/sbatch, or use submit: auto or sbatch")
    if s.sbatch_args and s.submit == "step":
        raise at("sbatch_args").error("slurm.sbatch_args", "submit: step runs srun inside the allocation, no sbatch")


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


def rendezvous_problem(field: str, runner: str, wrapped_command: bool) -> str | None:
    """Why this runner would ignore the master_addr/master_port a profile chose, or None (then it is used)."""
    if runner == "mirage":
        return f"mirage picks the rendezvous itself (it exports MASTER_ADDR/MASTER_PORT to the ranks); remove {field}"
    if runner == "xla":
        return f"the xla runner uses no rendezvous (torch_xla.launch sets up its replicas); remove {field}"
    if runner == "torchrun" and wrapped_command:
        return (f"the wrapped torchrun command chooses its own rendezvous: give it --master-addr/--master-port or"
                f" --rdzv-endpoint instead of {field}")
    if runner == "slurm":
        return (f"the slurm runner's ranks meet at the first node of the job (its Slurm NodeAddr); slurm.port sets"
                f" the port; remove {field}")
    return None


def unbindable(addr: str) -> str | None:
    """Why the ranks, which all run on this machine, could not listen on addr, or None."""
    import socket

    try:
        with socket.socket() as s:  # as session.rendezvous_port binds it
            s.bind((addr, 0))
    except (OSError, UnicodeError) as exc:  # gaierror for a name that does not resolve, idna's UnicodeError
        why = getattr(exc, "strerror", None) or exc
        return f"cannot listen on {addr!r} on this machine, where every rank runs: {why}"
    return None


def _check_rendezvous(f: _Fields, profile: Profile) -> None:
    for name, value in (("master_port", profile.master_port), ("master_addr", profile.master_addr)):
        node = f.node(name)
        if node is None or value == default(name):
            continue
        problem = rendezvous_problem(name, profile.runner, bool(profile.workload.command))
        if problem is None and name == "master_addr":
            problem = unbindable(value)
        if problem is not None:
            raise node.loc.error(name, problem)


def _build(root: _Node, source: str, base: Path, default_name: str) -> Profile:
    f = _Fields(root, "", TOP_KEYS, root.loc, Profile)
    nproc = f.typed("nproc", _int(1))
    nnodes = f.typed("nnodes", _int(1))
    max_world = f.typed("max_world_size", _int(1, WORLD_CEILING, nullable=True))
    limit = default_max_world_size() if max_world is None else max_world
    explicit = max_world is not None
    nproc_node, nnodes_node = f.node("nproc"), f.node("nnodes")
    runner_node = f.node("runner")
    on_slurm = runner_node is not None and runner_node.kind == "scalar" and runner_node.value == "slurm"
    if on_slurm:
        # Slurm's nodes are other machines: this one's cores bound the ranks of one node, never the whole job
        _check_world([("nproc", nproc_node, nproc)], root.loc, limit, explicit)
        _check_world([("nproc", nproc_node, nproc), ("nnodes", nnodes_node, nnodes)], root.loc,
                     max_world or WORLD_CEILING, True)
    else:
        _check_world([("nproc", nproc_node, nproc), ("nnodes", nnodes_node, nnodes)], root.loc, limit, explicit)
    mirage = _mirage(f.node("mirage"), root.loc, base, nproc, nnodes)
    xla = _xla(f.node("xla"), root.loc, base, nproc)
    m_nodes = ("mirage.num_nodes", _child(f.node("mirage"), "num_nodes"), mirage.num_nodes)
    if not on_slurm:  # mirage's and xla's counts default to nproc/nnodes; a Slurm job runs neither
        _check_world([("mirage.gpus_per_node", _child(f.node("mirage"), "gpus_per_node"), mirage.gpus_per_node),
                      m_nodes], root.loc, limit, explicit)
        _check_world([("nproc", nproc_node, nproc), m_nodes], root.loc, limit, explicit)  # mirage's world
        _check_world([("xla.num_devices", _child(f.node("xla"), "num_devices"), xla.num_devices)], root.loc, limit,
                     explicit)
    profile = Profile(
        name=f.get("name", None, _name) if f.node("name") is not None else _default_name(default_name, root.loc),
        description=f.typed("description", _str()),
        runner=f.typed("runner", _enum(RUNNERS)),
        nproc=nproc,
        nnodes=nnodes,
        workload=_workload(f.node("workload"), root.loc, base),
        env=f.typed("env", _env_map),
        backend=f.typed("backend", _enum(BACKENDS)),
        device=f.typed("device", _enum(DEVICES)),
        steps=f.typed("steps", _int(1, nullable=True)),
        seed=f.typed("seed", _int(0)),
        stall_after=f.typed("stall_after", _num(0, strict=True, auto=True)),
        startup_grace=f.typed("startup_grace", _num(0, strict=True)),
        agent_exit_grace=f.typed("agent_exit_grace", _num(0, strict=True)),
        on_stall=f.typed("on_stall", _enum(ON_STALL)),
        timeout=f.typed("timeout", _num(0, strict=False)),
        master_addr=f.typed("master_addr", _str()),
        master_port=f.typed("master_port", _int(1, 65535, auto=True)),
        replica_check=f.typed("replica_check", _bool),
        fault=_fault(f.node("fault"), root.loc, nproc * nnodes, nproc, nnodes),
        mirage=mirage,
        xla=xla,
        max_world_size=max_world,
        source=source,
        rdzv_backend=f.typed("rdzv_backend", _enum(RDZV_BACKENDS)),
        rdzv_endpoint=f.get("rdzv_endpoint", None, _endpoint),
        rdzv_id=f.get("rdzv_id", None, _rdzv_id),
        local_addr=f.typed("local_addr", _str(nullable=True)),
        slurm=_slurm(f.node("slurm"), root.loc),
        flight_recorder=f.typed("flight_recorder", _bool),
    )
    _check_rendezvous(f, profile)
    _check_rdzv(f, profile)
    _check_slurm(f, profile)
    return _runner_for_command(f, profile)


def _runner_for_command(f: _Fields, profile: Profile) -> Profile:
    """A `command` workload runs as the runner that can run it: the torchrun runner only wraps a torchrun command line.
    Without a `runner:` the command says which (as for `ddptui -- CMD`); a `runner: torchrun` it cannot wrap is an
    error here, where the file and line are known, not a traceback when the run is planned."""
    cmd = profile.workload.command
    if not cmd or profile.runner != "torchrun" or torchrun_argv.launcher_end(cmd) is not None:
        return profile
    node = f.node("runner")
    if node is None:
        return replace(profile, runner="env")
    raise node.loc.error("runner", f"the torchrun runner wraps a torchrun command line and workload.command starts "
                                   f"with {cmd[0]!r}; use runner: env to run the command as each rank, or "
                                   "workload.script/module for torchrun to start")


# ---------------------------------------------------------------- public entry points

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
    return _build(root, file, Path(os.path.abspath(p.parent)), p.stem)


def adhoc_profile(command: Sequence[str], overrides: Sequence[str] = ()) -> Profile:
    """A profile for `ddptui -- CMD...`: the command runs as given, under torchrun when it is torchrun, as a Slurm
    step or job when it is srun."""
    cmd = [str(c) for c in command]
    loc = _Loc(ADHOC_SOURCE)
    if not cmd:
        raise loc.error(None, "expected a command after --")
    torchrun = torchrun_argv.launcher_end(cmd) is not None
    nproc = nnodes = 1
    runner = "torchrun" if torchrun else "env"
    if torchrun:
        nproc = torchrun_argv.nproc_per_node(cmd) or 1
        nnodes = torchrun_argv.max_nodes(cmd) or 1
    elif srun_argv.is_srun(cmd):  # srun starts the ranks on the nodes: the slurm runner wraps it
        runner = "slurm"
        nproc, nnodes = srun_argv.counts(cmd)

    def scalar(v: Any) -> tuple[_Loc, _Node]:
        return loc, _Node("scalar", v, loc, str(v))

    workload = _Node("map", {"command": (loc, _Node("seq", [scalar(c)[1] for c in cmd], loc))}, loc)
    root = _Node("map", {"name": scalar("adhoc"), "runner": scalar(runner),
                         "nproc": scalar(nproc), "nnodes": scalar(nnodes), "workload": (loc, workload)}, loc)
    for item in overrides:
        _apply_override(root, item)
    return _build(root, ADHOC_SOURCE, Path(os.getcwd()), "adhoc")


def shipped_dir() -> Path | None:
    """The folder of profiles installed with ddptui (the `ddptui.profiles` package), if importable."""
    try:
        from importlib.resources import files

        folder = Path(str(files("ddptui.profiles")))
    except (ImportError, TypeError, ValueError):
        return None
    return folder if folder.is_dir() else None


def _candidates() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for folder in (shipped_dir(), Path.cwd() / "profiles"):  # local last: it wins
        if folder is not None and folder.is_dir():
            for p in folder.glob("*.yaml"):
                found[p.stem] = p
    return found


def list_profiles() -> list[Path]:
    """Shipped and ./profiles YAML files, one per name (./profiles wins), sorted by name."""
    found = _candidates()
    return [found[k] for k in sorted(found)]


def find_profile(name_or_path: str | Path) -> Path:
    """An existing file, else ./profiles/<name>.yaml, else the shipped profile of that name."""
    p = Path(name_or_path)
    if _is_file(p) or (os.path.exists(p) and not _is_dir(p)):  # a FIFO or device: load_profile says what it is
        return p
    name = str(name_or_path)
    if name.endswith((".yaml", ".yml")) or os.sep in name:
        raise ProfileError(name, None, None, None, "no such file")
    for folder in (Path("profiles"), shipped_dir()):
        if folder is not None and _is_file(folder / f"{name}.yaml"):
            return folder / f"{name}.yaml"
    names = sorted(_candidates())
    raise ProfileError(None, None, None, None, f"no profile named '{name}'{_suggest(name, names)};"
                                               f" available: {', '.join(names) or 'none'}")
