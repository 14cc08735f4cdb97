"""Known-problem hints raised during the run (what the message means and how to fix it), after the fix of each verdict
the run had."""
from __future__ import annotations

from rich.text import Text
from textual.containers import VerticalScroll
from textual.reactive import reactive
from textual.widgets import Static

from ...runners.events import HintRaised


def render_hints(hints: list[HintRaised], start_wall: float | None, fixes: tuple = ()) -> Text:
    """The engine's fix of each verdict the run had (`fixes`: (title, fix) of tui/verdicts.py's list), then every
    known-problem hint raised, with its explanation and fix."""
    if not hints and not fixes:
        return Text("No hints raised.", style="dim")
    t = Text()
    for title, fix in fixes:
        t.append(f"[{title}] what to do about it", style="bold yellow")
        t.append("  (the engine's fix; the Verdict tab has the verdict whole)\n")
        t.append("    fix: ", style="bold green")
        t.append(f"{fix}\n\n")
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


def hint_toast(h: HintRaised, short: bool) -> tuple[str, str]:
    """(message, title) of the notification a new hint raises; on a short terminal one line that points to the Hints
    tab, since the full explanation and fix would cover the crash view or the panes for as long as it shows."""
    who = f"rank {h.rank}" if h.rank is not None else "launcher"
    if short:
        return "h: why, and the fix", f"{h.title} ({who})"
    return f"{h.explanation}\nfix: {h.fix}", f"{h.title} ({who})"


class HintsView(VerticalScroll):
    """Shows ``hints``: (the hints raised so far, the run's start wall time, the verdicts' (title, fix))."""

    hints: reactive[tuple] = reactive(((), None, ()), repaint=False, init=False)

    def compose(self):
        yield Static(render_hints([], None), classes="hints-text")

    def watch_hints(self, hints: tuple) -> None:
        self.query_one(".hints-text", Static).update(render_hints(list(hints[0]), hints[1], hints[2]))
