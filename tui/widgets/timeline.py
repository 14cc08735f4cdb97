"""The merged timeline: every rank's lines in read-time order, tagged with the rank, filterable, searched matches
highlighted; draws only the rows in view."""
from __future__ import annotations

from collections import deque

from rich.segment import Segment
from rich.style import Style
from textual.geometry import Offset, Size
from textual.scroll_view import ScrollView
from textual.selection import Selection
from textual.strip import Strip

from ..model import TIMELINE_LINES, RunModel
from ..ranktag import untagged
from ..search import Match, Query, occurrences
from .tail_view import clean, highlighted

PREFIX = 21  # "%9.3f %8s ! " before a line's text
LAYOUT_TRIES = 20  # refreshes a match waits for the view's height before it is scrolled to as things are


def timeline_text(model: RunModel, item) -> str:
    w, r, s, t = item
    who = "launcher" if r is None else f"rank {r}"
    return f"{model.rel(w):9.3f} {who:>8} {'!' if s == 'err' else ' '} {untagged(r, t)}"


def matches(item, needle: str) -> bool:
    """A timeline line the filter keeps: its text or its "rank N" / "launcher" tag contains `needle` (lower case)."""
    return needle in item[3].lower() or needle in (f"rank {item[1]}" if item[1] is not None else "launcher")


class TimelineView(ScrollView, can_focus=True):
    """Rows drawn from the model's own bounded timeline (Line API, as Textualize/toolong draws its logs): lines that
    arrive cost nothing here, showing the tab formats only the rows in view, and every line the model keeps can be
    scrolled to. A filter keeps its matches from the moment it is set (the model's lines, then each new one).

    Follows the newest line while it is at the bottom; scrolled up, the same lines stay in view as new ones arrive
    (and old ones leave the model's buffer). The mouse selects text as in Textual's Log (ctrl+c copies it); a
    selection is held by row number since the run began, so it stays on its lines as older ones leave."""

    DEFAULT_CSS = """
    TimelineView {
        background: $surface;
        color: $text;
        overflow: scroll;
        &:focus { background-tint: $foreground 5%; }
    }
    """

    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self.model: RunModel | None = None
        self._needle: str | None = None
        self._rows: deque = deque()  # what is shown: the model's timeline, or the matches of the filter
        self._ever = 0  # rows ever appended to _rows (its first row is row _ever - len(_rows))
        self._seq = 0  # the model's timeline_seq when last shown
        self._width = 0
        self._front = 0  # _front_now() when last shown
        self._base: Style | None = None

        self.search_query: Query | None = None  # the search whose matches are highlighted
        self.current: tuple[int, int] | None = None  # (row since the run began, start) of the match n/N went to
        self.scrolled = True  # False while a match waits for the view's height to be scrolled into view

    def on_mount(self) -> None:
        # Follow the newest line through resizes too (the end banner, a smaller terminal), not only through
        # new lines; scrolling up releases it, scrolling back to the bottom takes it again.
        self.anchor()

    @property
    def line_count(self) -> int:
        return len(self._rows)

    @property
    def lines(self) -> list[str]:
        """Every row as text (tests, exports); drawing never needs it."""
        return [self._text(it) for it in self._rows]

    def reset(self) -> None:
        """The model's lines were replaced (a replay stepped back): the next show() reads them anew."""
        self.model = None
        self.current = None

    def set_search(self, query: Query | None) -> None:
        if query != self.search_query:
            self.search_query, self.current = query, None
            self.refresh()

    def _searched(self, item) -> tuple[int | None, str, str]:
        """(rank, stream, the line's text as drawn after its stamp and tag): what a search looks in."""
        text = clean(self._text(item))
        return item[1], item[2], text[PREFIX:]

    def search_matches(self) -> list[Match]:
        """Every match of the search in the rows shown, numbered by row since the run began."""
        if self.search_query is None or self.model is None:
            return []
        return occurrences(self._rows, self.search_query, self._searched, self._front_now())

    def go_to(self, match: Match) -> None:
        """Scroll the match into view (its row in the middle, its text in sight) and mark it as the current one."""
        row, start, end = match
        i = row - self._front_now()
        self.current, self.scrolled = (row, start), True
        x = 0 if PREFIX + end <= self.size.width else PREFIX + start - 8
        self.scroll_to(x=max(0, x), y=max(0, i - self.size.height // 2), animate=False, immediate=True)
        self.refresh()

    def go_to_once_shown(self, match: Match) -> None:
        """n from another tab: the match is the current one now, and is scrolled to after the refresh that shows the
        tab, once the view has its height."""
        self.current, self.scrolled = match[:2], False
        self.call_after_refresh(self.go_to_when_laid_out, match)

    def go_to_when_laid_out(self, match: Match, tries: int = LAYOUT_TRIES) -> None:
        """go_to once the view has its height: a tab that has just been shown gets it a refresh or more later, and a
        match put in the middle of a view of height 0 would land at its top."""
        if not self.size.height and tries > 0:
            self.scrolled = False
            self.call_after_refresh(self.go_to_when_laid_out, match, tries - 1)
            self.refresh()
            return
        self.go_to(match)

    def show(self, model: RunModel, needle: str) -> None:
        needle = needle.lower()
        following = self.scroll_y >= self.max_scroll_y
        if model is not self.model or needle != self._needle:
            self.model, self._needle = model, needle
            self._rows = model.timeline if not needle else deque(
                (it for it in model.timeline if matches(it, needle)), maxlen=TIMELINE_LINES)
            self._ever, self._width = len(self._rows), 0
            new = list(self._rows)
            following = True
        else:
            fresh = model.timeline_seq - self._seq
            if fresh <= 0:
                return
            added = list(model.timeline)[-min(fresh, len(model.timeline)):] if fresh < len(model.timeline) \
                else list(model.timeline)
            if needle:
                new = [it for it in added if matches(it, needle)]
                self._rows.extend(new)
            else:
                new = added  # already in _rows: it is the model's own deque
            self._ever += len(new)
        self._seq = model.timeline_seq
        front, self._front = self._front, self._front_now()
        if new:
            self._width = max(self._width, PREFIX + max(len(it[3]) for it in new))
        size = Size(self._width, len(self._rows))
        if size != self.virtual_size:  # while the buffer fills or a longer line comes
            # Its own scrollbars only (always shown: overflow scroll), not a relayout of the whole screen: setting
            # virtual_size reflowed every widget, 2-8 ms of each redraw of this tab and of the key that shows it.
            self.set_reactive(ScrollView.virtual_size, size)
            self._scroll_update(size)
        if following:
            self.scroll_end(animate=False, immediate=True, x_axis=False)
        else:  # rows that left the buffer's front: the same lines stay in view
            gone = self._front - front
            if gone > 0:
                self.scroll_to(y=max(0, self.scroll_y - gone), animate=False, immediate=True)
        self._base = None
        self.refresh()

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._base = None

    def _front_now(self) -> int:
        """Rows that ever left the front of what is shown (the model's buffer is bounded, and so are the matches)."""
        if not self._needle and self.model is not None:
            return self.model.timeline_seq - len(self.model.timeline)
        return self._ever - len(self._rows)

    def _text(self, item) -> str:
        assert self.model is not None  # rows come from a model
        return timeline_text(self.model, item)

    def get_selection(self, selection: Selection) -> tuple[str, str] | None:
        """The selected text: rows are numbered from the run's first (render_line's offsets), the buffer from its
        front; the part of a selection whose rows have left the buffer is gone with them."""
        if self.model is None or not self._rows:
            return None
        front = self._front_now()
        start, end = selection
        if end is not None and end.y < front:
            return None
        if start is not None:
            start = Offset(start.x, start.y - front) if start.y >= front else Offset(0, 0)
        if end is not None:
            end = Offset(end.x, end.y - front)
        text = "\n".join(clean(self._text(it)) for it in self._rows)
        return Selection(start, end).extract(text), "\n"

    def selection_updated(self, selection: Selection | None) -> None:
        self.refresh()

    def render_line(self, y: int) -> Strip:
        scroll_x, scroll_y = self.scroll_offset
        width = self.size.width
        if self._base is None:
            self._base = self.rich_style  # it walks the ancestors: once per repaint, not per row
        base = self._base
        i = scroll_y + y
        if i >= len(self._rows):
            return Strip.blank(width, base)
        text = clean(self._text(self._rows[i]))
        row = self._front_now() + i  # numbered from the run's first row: a selection stays on its lines
        segments = [Segment(text, base)]
        item = self._rows[i]
        if self.search_query is not None and self.search_query.allows(item[1], item[2]):
            spans = [(s + PREFIX, e + PREFIX) for s, e in self.search_query.spans(text[PREFIX:])]
            now = self.current[1] + PREFIX if self.current is not None and self.current[0] == row else None
            segments = highlighted(text, spans, base, now)
        selection = self.text_selection
        if selection is not None and (span := selection.get_span(row)) is not None:
            start, end = span[0], len(text) if span[1] == -1 else span[1]
            picked = base + self.screen.get_component_rich_style("screen--selection")
            segments = [Segment(text[:start], base), Segment(text[start:end], picked), Segment(text[end:], base)]
        strip = Strip(segments).crop_extend(scroll_x, scroll_x + width, base)
        return strip.apply_offsets(scroll_x, row)
