"""A cheap log tail: draws only the last lines that fit (optionally filtered, searched matches highlighted) straight
from a bounded buffer."""
from __future__ import annotations

import re
from collections.abc import Sequence

from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.reactive import reactive
from textual.strip import Strip
from textual.widget import Widget

from ..search import Query

# Terminal control sequences and characters a rank may print: never sent to our own terminal.
_CONTROL = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-_]|[\x00-\x08\x0b-\x1f\x7f-\x9f]")
STAMP = Style(dim=True)
ERR = Style(color="red")
STAMP_WIDTH = 9  # "%8.3f " seconds since the start
MATCH = Style(color="black", bgcolor="yellow")  # a search's match; the one n/N went to is underlined too
CURRENT = Style(color="black", bgcolor="dark_orange", bold=True, underline=True)
TEXT_MIN = 24  # a narrower tail drops the timestamps, or a pane of 16 ranks on 80 columns shows almost no text


def stamped(width: int) -> bool:
    """Whether a tail this wide shows read-time stamps before the text."""
    return width >= STAMP_WIDTH + TEXT_MIN


def clean(text: str) -> str:
    if "\t" in text:
        text = text.expandtabs(4)
    return _CONTROL.sub("", text) if not text.isprintable() else text


def highlighted(text: str, spans: Sequence[tuple[int, int]], base: Style, current: int | None = None) -> list:
    """Segments of `text` with its search matches (start, end) marked; the match starting at `current` stands out."""
    out, at = [], 0
    for start, end in spans:
        if start > at:
            out.append(Segment(text[at:start], base))
        out.append(Segment(text[start:end], base + (CURRENT if start == current else MATCH)))
        at = end
    out.append(Segment(text[at:], base))
    return out


def format_line(rel: float, stream: str, text: str, prefix: str = "", stamp: bool = True) -> Text:
    t = Text(no_wrap=True, overflow="ellipsis", end="")
    if stamp:
        t.append(f"{rel:8.3f} ", style="dim")
    if prefix:
        t.append(prefix, style="bold cyan")
    t.append(clean(text), style="red" if stream == "err" else "")
    return t


def matching_tail(lines: Sequence, needle: str, n: int, text_at: int = 2) -> list:
    """The last n entries whose text contains needle (case-insensitive), oldest first."""
    out: list = []
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
    """The newest lines of one rank (Line API: one Strip per row, no Rich layout pass).

    Repaints when ``seq`` (lines ever appended to ``lines``), ``needle`` or ``start_wall`` change: a rank whose
    progress moved but whose lines did not costs nothing here."""

    DEFAULT_CSS = "TailView { height: 1fr; overflow: hidden; }"

    seq: reactive[int] = reactive(-1, init=False)
    needle: reactive[str] = reactive("", init=False)
    start_wall: reactive[float] = reactive(0.0, init=False)
    idle: reactive[str] = reactive("", init=False)  # what the rank does before its first line ("rendezvous 12s")

    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self.lines: Sequence = ()
        self._rows: list | None = None
        self._rows_h = -1  # the height _rows was cut for
        self._base: Style | None = None  # rich_style walks the ancestors: once per refresh, not per row
        self.search_query: Query | None = None  # the search whose matches are highlighted
        self.search_rank: int | None = None  # whose lines these are (a search scoped to ranks skips the others)

    def show_lines(self, lines: Sequence, start_wall: float | None, needle: str, seq: int) -> None:
        """Show the newest of `lines`, of which `seq` were ever appended."""
        if lines is not self.lines:
            self.lines = lines
            self.seq = -1  # another buffer: whatever its count, drawn again
        self.start_wall, self.needle, self.seq = start_wall or 0.0, needle, seq

    def set_search(self, query: Query | None, rank: int | None) -> None:
        if (query, rank) != (self.search_query, self.search_rank):
            self.search_query, self.search_rank = query, rank
            self.refresh()

    def _forget(self) -> None:
        self._rows = None
        self._base = None

    watch_seq = watch_needle = watch_start_wall = watch_idle = _forget

    def empty_text(self) -> str:
        if self.needle:
            return f"(no line matches {self.needle!r})"
        return f"({self.idle})" if self.idle else "(no output yet)"

    def tail_height(self) -> int:
        """Rows the lines get (PaneBody keeps its top rows for the status line and the bar)."""
        return self.size.height

    def rows(self) -> list:
        """The newest matching lines that fit, cut for the height the widget has now.

        Keyed by height rather than cleared on Resize: Textual can paint a widget at its new size before the
        Resize message arrives (a tab shown again after the banner took a row), and rows cut for the old,
        taller size would then start at the top and push the newest lines out of sight.
        """
        h = self.tail_height()
        if self._rows is None or self._rows_h != h:
            self._rows = matching_tail(self.lines, self.needle, h)
            self._rows_h = h
        return self._rows

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        if self._base is None:
            self._base = self.rich_style
        base = self._base
        rows = self.rows()
        if not rows and y == 0:
            return Strip([Segment(self.empty_text(), base + STAMP)]).crop_extend(0, width, base)
        if y >= len(rows):
            return Strip.blank(width, base)
        w, s, t = rows[y]
        line = clean(t)
        style = base + ERR if s == "err" else base
        q = self.search_query
        texts = highlighted(line, q.spans(line), style) if q is not None and q.allows(self.search_rank, s) else \
            [Segment(line, style)]
        segs = [Segment(f"{w - self.start_wall:8.3f} ", base + STAMP), *texts] if stamped(width) else texts
        return Strip(segs).crop_extend(0, width, base)

    def render(self) -> Text:  # for tests and exports: the same rows as text
        rows = self.rows()
        if not rows:
            return Text(self.empty_text(), style="dim")
        return Text("\n", no_wrap=True, overflow="ellipsis", end="").join(
            format_line(w - self.start_wall, s, t, stamp=stamped(self.size.width)) for w, s, t in rows)
