"""One rank full screen: its whole bounded log (scrollable, filtered), status and progress, redrawn when the rank changes."""
from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import Log, ProgressBar, Static

from ..model import RunModel
from ..widgets.keybar import KeyBar
from ..widgets.rank_pane import badge_words, status_line


class ZoomScreen(Screen):
    BINDINGS = [
        Binding("escape", "app.pop_screen", "back"),
        Binding("z", "app.pop_screen", "unzoom"),
        Binding("q", "app.quit_run", "quit"),
        Binding("d", "app.dump", "dump stacks"),
        Binding("question_mark", "app.help", "help"),
    ]

    def __init__(self, model: RunModel, rank: int, needle: str = "") -> None:
        super().__init__()
        self.model, self.rank, self.needle = model, rank, needle.lower()
        self._seq = 0  # the rank's lines already written to the log (RankView.seq)

    def compose(self) -> ComposeResult:
        yield Static("", id="zoom-head")
        yield ProgressBar(total=None, show_eta=False, id="zoom-progress")
        yield Log(max_lines=4000, auto_scroll=True, id="zoom-log")
        yield KeyBar()

    def on_mount(self) -> None:
        self.query_one(ProgressBar).display = bool(self.model.steps)
        self.query_one(Log).anchor()  # the newest line stays in view when the terminal gets smaller
        rv = self.model.rank(self.rank)
        self._seq = rv.seq - len(rv.lines)
        self.show()

    def on_model_changed(self, msg) -> None:
        if self.rank in msg.changes.ranks or msg.changes.run:
            self.show()

    def show(self) -> None:
        m, rv = self.model, self.model.rank(self.rank)
        filt = f"   filter: {self.needle!r}" if self.needle else ""
        where = f" · {m.where(self.rank)}" if m.where(self.rank) else ""
        self.query_one("#zoom-head", Static).update(
            Text(f" rank {self.rank} · {badge_words(rv)} · pid {rv.pid or '-'}{where} · {status_line(rv, m.steps, m.last_wall)}{filt}",
                 no_wrap=True, overflow="ellipsis", style="bold"))
        if m.steps:
            self.query_one(ProgressBar).update(total=m.steps, progress=min(rv.step or 0, m.steps))
        new = rv.seq - self._seq
        if new <= 0:
            return
        items = list(rv.lines)[-min(new, len(rv.lines)):]
        self._seq = rv.seq
        lines = [f"{m.rel(w):9.3f} {'!' if s == 'err' else ' '} {t}" for w, s, t in items
                 if not self.needle or self.needle in t.lower()]
        if lines:
            self.query_one(Log).write_lines(lines)
