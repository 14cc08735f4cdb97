"""The one post-import hook of the injected code: patch a module right after the program first imports it."""
from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

Patch = Callable[[Any], None]

# module name -> the patches still waiting for its import, in registration order
_pending: dict[str, list[Patch]] = {}


def when_imported(name: str, patch: Patch) -> Callable[[], None]:
    """Run patch(module) once `name` is imported (at once if it already is); returns what cancels it if still pending.

    Never imports the module itself. A patch that raises is dropped: the program's import goes on unpatched.
    """
    mod = sys.modules.get(name)
    if mod is not None:  # imported before us (unusual): patch in place
        _apply([patch], mod)
        return _nothing
    _pending.setdefault(name, []).append(patch)
    if _FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FINDER)

    def cancel() -> None:
        waiting = _pending.get(name)
        if waiting and patch in waiting:
            waiting.remove(patch)
            if not waiting:
                del _pending[name]
        _drop_finder_if_idle()

    return cancel


def pending() -> dict[str, int]:
    """Module name -> how many patches still wait for it (for tests and diagnostics)."""
    return {name: len(patches) for name, patches in _pending.items()}


def _nothing() -> None:
    pass


def _apply(patches: list[Patch], module: Any) -> None:
    for patch in patches:
        try:
            patch(module)
        except Exception:
            pass


def _drop_finder_if_idle() -> None:
    if not _pending and _FINDER in sys.meta_path:
        try:
            sys.meta_path.remove(_FINDER)
        except ValueError:
            pass


class _Loader:
    """Delegates to the real loader; after the module ran, applies the patches and puts the real loader back."""

    def __init__(self, real, patches: list[Patch]):
        self._real, self._patches = real, patches

    def __getattr__(self, name):
        return getattr(self._real, name)

    def create_module(self, spec):
        return self._real.create_module(spec)

    def exec_module(self, module):
        try:  # later reloads and introspection see the module's own loader
            module.__spec__.loader = self._real
            module.__loader__ = self._real
        except Exception:
            pass
        self._real.exec_module(module)
        _apply(self._patches, module)


class _PostImportFinder:
    """A sys.meta_path entry that wraps only the loaders of pending modules, and leaves once none is pending."""

    def find_spec(self, name, path=None, target=None):
        if name not in _pending:
            return None
        try:
            for finder in sys.meta_path:
                if finder is self or not hasattr(finder, "find_spec"):
                    continue
                spec = finder.find_spec(name, path, target)
                if spec is not None:
                    break
            else:
                return None
            if spec.loader is None or not hasattr(spec.loader, "exec_module"):
                return spec
            spec.loader = _Loader(spec.loader, _pending.pop(name))  # type: ignore[assignment]  # a wrapper
            _drop_finder_if_idle()
            return spec
        except Exception:
            return None


_FINDER = _PostImportFinder()
