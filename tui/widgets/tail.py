"""A cheap log tail: renders only the last lines that fit (optionally filtered) straight from a bounded buffer."""
from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text
from textual.widget import Widget

STREAM_STYLE = {"err": "red"}


def format_line(rel: float, stream: str, text: str, prefix: str = "") -> Text:
    t = Text(no_wrap=True, overflow="ellipsis", end="")
    t.append(f"{rel:8.3f} ", style="dim")
    if prefix:
        t.append(prefix, style="bold cyan")
    t.append(text, style=STREAM_STYLE.get(stream, ""))
    return t


def matching_tail(lines: Sequence, needle: str, n: int, text_at: int = 2) -> list:
    """The last n entries whose text contains needle (case-insensitive), oldest first."""
    out = []
    if n <= 0:
        return out
    needle = needle.lower()
    for item in reversed(lines):
        if not needle or needle in item[text_at].lower():
            out.append(item)
            if len(out) >= n:
                break
    out.reverse()
    return out


class TailView(Widget):
    """The newest lines of one rank; refreshed by its pane when the rank's line count moves."""

    DEFAULT_CSS = "TailView { height: 1fr; overflow: hidden; }"

    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self.lines: Sequence = ()
        self.start_wall = 0.0
        self.needle = ""

    def show(self, lines: Sequence, start_wall: float | None, needle: str) -> None:
        self.lines, self.start_wall, self.needle = lines, start_wall or 0.0, needle
        self.refresh()

    def render(self) -> Text:
        rows = matching_tail(self.lines, self.needle, self.size.height)
        if not rows:
            return Text("(no output yet)" if not self.needle else f"(no line matches {self.needle!r})", style="dim")
        return Text("\n", no_wrap=True, overflow="ellipsis", end="").join(format_line(w - self.start_wall, s, t) for w, s, t in rows)
