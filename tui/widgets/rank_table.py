"""The compact per-rank view: one row per rank (marker, status, step, step time, loss, cpu, rss, last line), the
failed and the laggards on top, drawn line by line so 1,024 ranks cost what the visible rows cost."""
from __future__ import annotations

from rich.segment import Segment
from rich.style import Style
from textual import events
from textual.binding import Binding
from textual.geometry import Size
from textual.message import Message
from textual.reactive import reactive
from textual.scroll_view import ScrollView
from textual.strip import Strip

from .. import compact
from ..model import RunModel, human_bytes
from .tail_view import clean

WIDEST = (1, 6, 16, 28, 16, 9, 10, 5, 7)  # the most each column but the last line takes (cells are cut with …)
GAP = 1


def _fit(text: str, width: int) -> str:
    return text.ljust(width) if len(text) <= width else text[: max(0, width - 1)] + "…"


class RankTable(ScrollView, can_focus=True):
    """Rows from the model, ordered by tui/compact.py; redraws only the rows in view. Enter opens the rank under the
    cursor (``Open``); ``b`` changes the sort key."""

    BINDINGS = [
        Binding("up", "move(-1)", "up", show=False),
        Binding("down", "move(1)", "down", show=False),
        Binding("pageup", "page(-1)", "page up", show=False),
        Binding("pagedown", "page(1)", "page down", show=False),
        Binding("home", "edge(0)", "top", show=False),
        Binding("end", "edge(1)", "bottom", show=False),
        Binding("enter", "open", "open rank"),
        Binding("b", "sort", "sort by"),
    ]
    COMPONENT_CLASSES = {"rank-table--header", "rank-table--cursor", "rank-table--failed", "rank-table--stalled",
                         "rank-table--behind", "rank-table--slow", "rank-table--ok", "rank-table--err"}
    DEFAULT_CSS = """
    RankTable { height: 1fr; overflow-x: hidden; overflow-y: auto; }
    RankTable > .rank-table--header { text-style: bold; color: $text-muted; }
    RankTable > .rank-table--cursor { background: $accent 40%; text-style: bold; }
    RankTable > .rank-table--failed { color: $error; text-style: bold; }
    RankTable > .rank-table--stalled { color: $warning; text-style: bold; }
    RankTable > .rank-table--behind { color: $warning; text-style: bold reverse; }
    RankTable > .rank-table--slow { color: $warning; }
    RankTable > .rank-table--ok { color: $success; }
    RankTable > .rank-table--err { color: $error; }
    """

    sort_by: reactive[str] = reactive("rank", init=False)

    class Open(Message):
        """Enter on a row: show that rank (its pane, full screen)."""

        def __init__(self, rank: int) -> None:
            super().__init__()
            self.rank = rank

    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self.model: RunModel | None = None
        self.rows: dict[int, tuple[str, ...]] = {}  # rank -> its cells (compact.row_cells), formatted when shown
        self.why: dict[int, int] = {}  # rank -> compact.ROOT ... OTHER
        self.facts: dict[int, compact.Facts] = {}
        self.order: list[int] = []
        self.cursor_rank: int | None = None
        self._widths: tuple[int, ...] = ()
        self._styles: dict[str, Style] | None = None  # resolved once per theme, not per row

    # -- from the model -----------------------------------------------------------------------------
    def show(self, model: RunModel, changed=None) -> None:
        """Take the ranks in `changed` (None: all, e.g. a stall or a laggard that changes every rank's place) from the
        model, put them in order and redraw. Only the rows in view are formatted (at 1,024 ranks most are not)."""
        self.model = model
        ids = model.rank_ids()
        stalled = frozenset(model.stall.stalled) if model.stall is not None else frozenset()
        lag, root = frozenset(model.laggards), compact.root_ranks(model)
        todo = ids if changed is None or len(self.facts) != len(ids) else [r for r in changed if r in model.ranks]
        for r in todo:
            rv = model.rank(r)
            why = compact.trouble(rv, stalled, lag, root)
            self.why[r] = why
            self.facts[r] = compact.Facts(r, why, rv.step, rv.step_time, rv.loss)
            self.rows.pop(r, None)
        if changed is None or todo:
            self.order = compact.order(self.facts.values(), self.sort_by)
            if self.cursor_rank not in self.facts:
                self.cursor_rank = self.order[0] if self.order else None
            self.virtual_size = Size(self.size.width, len(self.order) + 1)  # last lines are cut: z shows them whole
            self._in_view()
            self.refresh()

    def cells(self, r: int) -> tuple[str, ...]:
        got = self.rows.get(r)
        if got is None:
            m = self.model
            assert m is not None  # rows are asked for once a model is shown
            got = self.rows[r] = compact.row_cells(m.ranks[r], self.why[r], m.steps, m.where(r), human_bytes)
        return got

    def _in_view(self) -> None:
        """Format the rows in view; the columns widen to fit them (never narrow: rows do not jump as they scroll)."""
        top = int(self.scroll_y)
        widths = list(self._widths) or [len(h) + 1 for h in compact.COLUMNS[:-1]]  # + the header's sort mark
        for r in self.order[top: top + (self.size.height or 100)]:  # before its first layout: a screenful
            for i, c in enumerate(self.cells(r)[:-1]):
                if len(c) > widths[i]:
                    widths[i] = min(len(c), WIDEST[i])
        self._widths = tuple(widths)

    def watch_sort_by(self) -> None:
        self.order = compact.order(self.facts.values(), self.sort_by)
        self._in_view()
        self.refresh()

    def watch_scroll_y(self, old: float, new: float) -> None:
        if self.model is not None:
            self._in_view()
        super().watch_scroll_y(old, new)

    # -- drawing ------------------------------------------------------------------------------------
    def _resolve_styles(self) -> dict[str, Style]:
        if self._styles is None:
            base = self.rich_style
            self._styles = {"": base, **{k.split("--")[1]: base + self.get_component_rich_style(k, partial=True)
                                          for k in self.COMPONENT_CLASSES}}
        return self._styles

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._styles = None

    def line_text(self, cells: tuple[str, ...]) -> str:
        parts = [_fit(c, w) for c, w in zip(cells, self._widths, strict=False)]
        return (" " * GAP).join(parts) + " " * GAP + clean(cells[-1])

    def header_text(self) -> str:
        sorted_col = compact.COLUMNS.index(compact.SORT_COLUMN[self.sort_by])
        return self.line_text(tuple(h + "↓" if i == sorted_col else h for i, h in enumerate(compact.COLUMNS)))

    def render_line(self, y: int) -> Strip:
        st = self._resolve_styles()
        scroll_x, scroll_y = self.scroll_offset
        width = self.size.width
        if y == 0:
            return Strip([Segment(self.header_text(), st["header"])]).crop_extend(scroll_x, scroll_x + width, st[""])
        i = scroll_y + y - 1
        if i >= len(self.order):
            return Strip.blank(width, st[""])
        r = self.order[i]
        cells = self.cells(r)
        why = self.why[r]
        style = st[{compact.ROOT: "failed", compact.FAILED: "failed", compact.STALLED: "stalled", compact.BEHIND: "behind",
                    compact.SLOW: "slow"}.get(why, "")]
        if why == compact.OTHER and cells[3] == "exited ok":
            style = st["ok"]
        if r == self.cursor_rank and self.has_focus:
            style = style + st["cursor"]
        last = clean(cells[-1])
        head = (" " * GAP).join(_fit(c, w) for c, w in zip(cells, self._widths, strict=False)) + " " * GAP
        err = self.model is not None and bool(self.model.ranks[r].lines) and self.model.ranks[r].lines[-1][1] == "err"
        segs = [Segment(head, style), Segment(last, style + st["err"] if err and why == compact.OTHER else style)]
        return Strip(segs).crop_extend(scroll_x, scroll_x + width, style if r == self.cursor_rank else st[""])

    def render_lines_text(self) -> list[str]:
        """Every row as text, top to bottom, the header first (for tests and exports)."""
        return [self.header_text()] + [self.line_text(self.cells(r)) for r in self.order]

    # -- the cursor ---------------------------------------------------------------------------------
    def _index(self) -> int:
        try:
            return self.order.index(self.cursor_rank)  # type: ignore[arg-type]  # None: in no order, ValueError below
        except ValueError:
            return 0

    def go_to(self, rank: int) -> None:
        """Put the cursor on `rank` and scroll it into view."""
        self.cursor_rank = rank
        i = self._index()
        rows = max(1, self.size.height - 1)
        if i < self.scroll_y:
            self.scroll_to(y=i, animate=False)
        elif i >= self.scroll_y + rows:
            self.scroll_to(y=i - rows + 1, animate=False)
        self.refresh()

    def action_move(self, delta: int) -> None:
        if self.order:
            self.go_to(self.order[max(0, min(len(self.order) - 1, self._index() + delta))])

    def action_page(self, direction: int) -> None:
        self.action_move(direction * max(1, self.size.height - 2))

    def action_edge(self, end: int) -> None:
        if self.order:
            self.go_to(self.order[-1 if end else 0])

    def action_open(self) -> None:
        if self.cursor_rank is not None:
            self.post_message(self.Open(self.cursor_rank))

    def action_sort(self) -> None:
        self.sort_by = compact.next_sort(self.sort_by)
        self.notify(f"ranks sorted by {compact.SORT_WORDS[self.sort_by]} (the failed and the laggards stay on top)",
                    timeout=3)

    def on_click(self, event: events.Click) -> None:
        i = int(self.scroll_y) + event.y - 1
        if 0 <= i < len(self.order):
            self.go_to(self.order[i])
            if event.chain >= 2:
                self.action_open()

    def on_resize(self) -> None:
        if self.model is not None:
            self.virtual_size = Size(self.size.width, len(self.order) + 1)
            self._in_view()

    def on_focus(self) -> None:
        self.refresh()

    def on_blur(self) -> None:
        self.refresh()
