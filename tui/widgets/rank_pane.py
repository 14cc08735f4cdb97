"""One rank's pane: status badge, progress bar, CPU/RSS and the newest log lines."""
from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import ProgressBar

from ddptui.tui.model import RankView, RunModel, human_bytes
from ddptui.tui.widgets.tail import LineView, TailView

BADGE_CLASSES = ("-running", "-slow", "-stalled", "-ok", "-failed", "-starting", "-killed")


def badge_class(rv: RankView) -> str:
    b = rv.badge()
    if b == "exited ok":
        return "-ok"
    if b.startswith("failed"):
        return "-failed"
    return "-" + b.split()[0] if ("-" + b.split()[0]) in BADGE_CLASSES else "-running"


def status_line(rv: RankView, steps: int | None) -> str:
    parts = []
    if rv.step is not None:
        parts.append(f"step {rv.step}" + (f"/{steps}" if steps else ""))
    if rv.loss is not None:
        parts.append(f"loss {rv.loss:.4g}")
    parts.append(f"cpu {rv.cpu:.0f}%" if rv.cpu is not None else "cpu -")
    parts.append(f"rss {human_bytes(rv.rss)}")
    if rv.detail and rv.status not in ("running",):
        parts.append(rv.detail)
    return "  ".join(parts)


class RankPane(Vertical, can_focus=True):
    """Focusable (digits / tab); z zooms the focused one."""

    def __init__(self, rank: int, **kw) -> None:
        super().__init__(id=f"rank-{rank}", classes="rank-pane -starting", **kw)
        self.rank = rank
        self._drawn: tuple = ()
        self._ready = False  # children exist only after mount; ticks may come first
        self._bar_q = -1
        self._bar_room = True  # the run screen takes the bar row away when panes are short of rows

    def compose(self) -> ComposeResult:
        yield LineView(classes="rank-status")
        yield ProgressBar(total=None, show_eta=False, show_percentage=True, classes="rank-progress")
        yield TailView(classes="rank-tail")

    def on_mount(self) -> None:
        self.border_title = f"rank {self.rank}"
        self.query_one(ProgressBar).display = False
        self._ready = True

    def update_from(self, model: RunModel, needle: str) -> None:
        if not self._ready:
            return
        rv = model.rank(self.rank)
        key = (rv.version, needle, model.steps)
        if key == self._drawn:
            return
        self._drawn = key
        title = f"rank {self.rank}" + (f" · pid {rv.pid}" if rv.pid else "") + (f" · {rv.host}" if rv.host else "")
        if title != self.border_title:
            self.border_title = title
        if rv.badge() != self.border_subtitle:
            self.border_subtitle = rv.badge()
        cls = badge_class(rv)
        if not self.has_class(cls):
            self.remove_class(*BADGE_CLASSES)
            self.add_class(cls)
        self.query_one(".rank-status", LineView).set(status_line(rv, model.steps))
        bar = self.query_one(ProgressBar)
        shown = bool(model.steps) and self._bar_room
        if bar.display != shown:
            bar.display = shown
        if shown:
            done = min(rv.step or 0, model.steps)
            q = done * 200 // model.steps  # redraw the bar only when it can look different
            if q != self._bar_q:
                self._bar_q = q
                bar.update(total=model.steps, progress=done)
        self.query_one(TailView).show(rv.lines, model.start_wall, needle, rv.seq)

    def show_bar(self, room: bool) -> None:
        """Keep the progress bar row (room) or give it to the log lines; drawn at the next update."""
        if room != self._bar_room:
            self._bar_room = room
            self._drawn = ()
            self._bar_q = -1
            if self._ready and not room:
                self.query_one(ProgressBar).display = False
