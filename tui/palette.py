"""The command palette's ddptui commands: every described binding of the screen it is opened from (and the app's)."""
from __future__ import annotations

from collections.abc import Callable, Iterator
from functools import partial
from typing import Any, NamedTuple

from textual.binding import Binding
from textual.command import DiscoveryHit, Hit, Hits, Provider

from .widgets.keybar import key_label

PACKAGE = __name__.rsplit(".", 1)[0].rsplit(".", 1)[0]  # "ddptui" installed: only its own classes' bindings


class PaletteCommand(NamedTuple):
    name: str  # the binding's description
    keys: str  # as the footer writes them
    run: Callable[[], Any]


def own_bindings(node: object) -> set[tuple[str, str]]:
    """(action, description) of the bindings that ddptui's classes declare (Textual's own: focus next, copy...,
    stay Textual's)."""
    out = set()
    for cls in type(node).__mro__:
        if not cls.__module__.startswith(PACKAGE + "."):
            continue
        for b in cls.__dict__.get("BINDINGS", ()):
            if isinstance(b, Binding) and b.description:
                out.add((b.action, b.description))
    return out


def screen_commands(screen: Any) -> Iterator[PaletteCommand]:
    """One command per action the screen (its focused widgets, the app) binds with a description, in the order the
    bindings resolve; none the screen leaves out of its footer (a replay's stop, dump...) or that is disabled now."""
    hidden: frozenset[str] = getattr(screen, "unlisted_actions", frozenset())
    seen: set[tuple[str, str]] = set()
    keys: dict[tuple[str, str], list[str]] = {}
    found: list[tuple[tuple[str, str], Any, Binding]] = []
    ours: dict[int, set[tuple[str, str]]] = {}
    for key, active in screen.active_bindings.items():
        node, b = active.node, active.binding
        if not active.enabled or b.system or b.action in hidden:
            continue
        if id(node) not in ours:
            ours[id(node)] = own_bindings(node)
        if (b.action, b.description) not in ours[id(node)]:
            continue
        ident = (b.description, "")  # one command per name: q, ctrl+c on the screen and ^q on the app are one "quit"
        keys.setdefault(ident, []).append(key_label(key))
        if ident not in seen:
            seen.add(ident)
            found.append((ident, node, b))
    for ident, node, b in found:
        yield PaletteCommand(b.description, " ".join(keys[ident]),
                             partial(screen.app.run_action, b.action, node))


class ScreenActions(Provider):
    """ddptui's commands in the palette, beside Textual's own (theme, keys, screenshot, quit: which asks first)."""

    async def discover(self) -> Hits:
        for c in screen_commands(self.screen):
            yield DiscoveryHit(c.name, c.run, help=f"key: {c.keys}")

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for c in screen_commands(self.screen):
            score = matcher.match(c.name)
            if score > 0:
                yield Hit(score, matcher.highlight(c.name), c.run, help=f"key: {c.keys}")
