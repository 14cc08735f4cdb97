"""The footer: the screen's keys on one line, drawn once (Textual's Footer recomposes on every focus change)."""
from __future__ import annotations

from rich.text import Text
from textual.widgets import Static


def key_label(key: str) -> str:
    return {"slash": "/", "question_mark": "?", "escape": "esc", "ctrl+q": "^q", "ctrl+l": "^l"}.get(key, key)


def bar_text(keys) -> Text:
    """(key, what it does) pairs as the footer draws them."""
    t = Text(no_wrap=True, overflow="ellipsis")
    for key, what in keys:
        t.append(f" {key} ", style="bold reverse")
        t.append(f" {what}  ")
    return t


def screen_keys(bindings, hidden: frozenset[str] = frozenset()) -> list[tuple[str, str]]:
    """The shown bindings of a screen, one per description, first key of each; none whose action is in `hidden`."""
    out, seen = [], set()
    for b in bindings:
        if not getattr(b, "show", True) or b.description in seen or b.action in hidden:
            continue
        seen.add(b.description)
        out.append((",".join(key_label(k) for k in b.key.split(",")[:1]), b.description))
    return out


class KeyBar(Static):
    DEFAULT_CSS = "KeyBar { dock: bottom; height: 1; background: $panel; }"

    def on_mount(self) -> None:
        self.update(bar_text(screen_keys(self.screen.BINDINGS, getattr(self.screen, "unlisted_actions", frozenset()))))

    def show_keys(self, keys) -> None:
        """Keys the screen chose for now (the picker's differ in its list and in a field)."""
        self.update(bar_text(keys))
