"""`--set key=value`: one override put into the tree read from the file, before the profile is built."""
from __future__ import annotations

from .errors import _Loc
from .model import WORKLOAD_KINDS
from .readers import _got
from .tree import MAX_PROFILE_BYTES, _compose, _Converter, _Node, _OverBound


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
