"""A rank pane's inside as one Line-API widget (status line, progress bar, newest lines): few widgets keep a full repaint cheap."""
from __future__ import annotations

from rich.segment import Segment
from rich.style import Style
from textual.geometry import Region
from textual.reactive import reactive
from textual.strip import Strip

from .tail_view import TailView

PERCENT_WIDTH = 5  # " 100%"


def bar_cells(width: int, total: int, done: int) -> tuple[int, bool]:
    """(full cells, a half cell after them) of a bar `width` cells wide at done/total, in half-cell steps."""
    if width <= 0 or total <= 0:
        return 0, False
    halves = min(2 * width, max(0, done) * 2 * width // total)
    return halves // 2, bool(halves % 2)


def percent(total: int, done: int) -> str:
    return f"{min(100, max(0, done) * 100 // total) if total > 0 else 0:>4}%"


class PaneBody(TailView):
    """Row 0: the status line; row 1: the progress bar when ``bar`` is set (total, done); below: the newest lines.

    One widget instead of a status line, a ProgressBar (four widgets) and a tail: Textual's cost of a full repaint
    (a tab shown again, a resize) grows with the widgets on screen, and 16 panes made it 112 of them. A status or
    bar change repaints its own row only; new lines repaint the tail rows."""

    COMPONENT_CLASSES = {"pane-body--status", "pane-body--bar", "pane-body--bar-complete", "pane-body--bar-rest"}
    DEFAULT_CSS = """
    PaneBody { height: 1fr; overflow: hidden; }
    PaneBody > .pane-body--status { color: $text-muted; }
    PaneBody > .pane-body--bar { color: $primary; }
    PaneBody > .pane-body--bar-complete { color: $success; }
    PaneBody > .pane-body--bar-rest { color: $surface; }
    """

    status: reactive[str] = reactive("", init=False, repaint=False)
    bar: reactive[tuple[int, int] | None] = reactive(None, init=False, repaint=False)

    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self._styles: dict[str, Style] | None = None

    def head_rows(self) -> int:
        return 1 + (self.bar is not None)

    def tail_height(self) -> int:
        return max(0, self.size.height - self.head_rows())

    def watch_status(self) -> None:
        self.refresh(Region(0, 0, self.size.width, 1))

    def watch_bar(self, old: tuple[int, int] | None, new: tuple[int, int] | None) -> None:
        if (old is None) != (new is None):  # the tail moves a row up or down
            self._forget()
            self.refresh()
        else:
            self.refresh(Region(0, 1, self.size.width, 1))

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._styles = None

    def _component(self, name: str) -> Style:
        if self._styles is None:
            self._styles = {}
        style = self._styles.get(name)
        if style is None:
            style = self._styles[name] = self.get_component_rich_style(f"pane-body--{name}", partial=True)
        return style

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        if self._base is None:
            self._base = self.rich_style
        base = self._base
        if y == 0:
            return Strip([Segment(self.status, base + self._component("status"))]).crop_extend(0, width, base)
        if y == 1 and self.bar is not None:
            return self._bar_line(width, base)
        return super().render_line(y - self.head_rows())

    def _bar_line(self, width: int, base: Style) -> Strip:
        assert self.bar is not None  # render_line draws the bar's row only when there is one
        total, done = self.bar
        cells = max(0, width - PERCENT_WIDTH)
        full, half = bar_cells(cells, total, done)
        style = base + self._component("bar-complete" if done >= total else "bar")
        rest = base + self._component("bar-rest")
        segs = [Segment("━" * full, style)]
        if half:
            segs.append(Segment("╸", style))
        left = cells - full - half
        if left > 0:
            segs.append(Segment("━" * left, rest))
        segs.append(Segment(percent(total, done), base))
        return Strip(segs).crop_extend(0, width, base)
