"""YAML → a tree of values that know where they were written, read within bounds (size, nodes, nesting)."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .errors import ProfileError, _Loc

_MAX_NODES = 20000  # aliases can make a small file expand enormously
_MAX_DEPTH = 64
# PyYAML composes ~35k nodes/s here: a profile is a few hundred bytes, so 64 KiB and 20,000 nodes bound
# the parse to well under a second whatever the file holds.
MAX_PROFILE_BYTES = 64 * 1024


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
