"""Known-problem hints raised during the run: what the message means and how to fix it."""
from __future__ import annotations

from rich.text import Text
from textual.containers import VerticalScroll
from textual.widgets import Static

from ddptui.runners.events import HintRaised


def render_hints(hints: list[HintRaised], start_wall: float | None) -> Text:
    if not hints:
        return Text("No hints raised.", style="dim")
    t = Text()
    for h in hints:
        rel = h.wall - (start_wall or h.wall)
        who = f"rank {h.rank}" if h.rank is not None else "launcher"
        t.append(f"{rel:8.3f} [{h.code}] {h.title}", style="bold yellow")
        t.append(f"  ({who})\n")
        if h.line:
            t.append(f"    {h.line}\n", style="dim")
        t.append(f"    {h.explanation}\n")
        t.append("    fix: ", style="bold green")
        t.append(f"{h.fix}\n\n")
    return t


class HintsView(VerticalScroll):
    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self._drawn = -1

    def compose(self):
        yield Static(render_hints([], None), classes="hints-text")

    def update_from(self, model) -> None:
        if len(model.hints) == self._drawn:
            return
        self._drawn = len(model.hints)
        self.query_one(".hints-text", Static).update(render_hints(model.hints, model.start_wall))
