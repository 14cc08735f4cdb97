"""The footer: the screen's keys on one line, drawn once (Textual's Footer recomposes on every focus change)."""
from __future__ import annotations

from rich.text import Text
from textual.widgets import Static


def key_label(key: str) -> str:
    return {"slash": "/", "question_mark": "?", "escape": "esc", "ctrl+q": "^q"}.get(key, key)


class KeyBar(Static):
    DEFAULT_CSS = "KeyBar { dock: bottom; height: 1; background: $panel; }"

    def on_mount(self) -> None:
        t = Text(no_wrap=True, overflow="ellipsis")
        seen = set()
        for b in self.screen.BINDINGS:
            if not getattr(b, "show", True) or b.description in seen:
                continue
            seen.add(b.description)
            key = ",".join(key_label(k) for k in b.key.split(",")[:1])
            t.append(f" {key} ", style="bold reverse")
            t.append(f" {b.description}  ")
        self.update(t)
