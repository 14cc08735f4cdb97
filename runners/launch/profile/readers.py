"""Field readers: one value of the tree checked against what its field expects, the error located at its node."""
from __future__ import annotations

import math
import os
import shlex
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .endpoint import split_endpoint
from .errors import ProfileError, _Loc
from .model import default
from .tree import _Node


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
