"""The crash panel: which rank failed first, how, its traceback excerpt, and what happened to every other rank."""
from __future__ import annotations

from rich.text import Text
from textual.containers import VerticalScroll
from textual.reactive import reactive
from textual.widgets import Static

from ...runners.events import CrashVerdict
from ...runners.evidence.words import ranks_text
from ..marks import FAILED


def render_crash(c: CrashVerdict | None) -> Text:
    if c is None:
        return Text("No crash.", style="dim")
    t = Text()
    t.append(f"{FAILED} Root cause: ", style="bold")
    t.append(f"{c.text}\n", style="bold red")
    t.append(f"rank {c.root_rank if c.root_rank is not None else '?'} · {c.exit}\n")
    others = {r: w for r, w in c.outcomes.items() if r != c.root_rank}
    if others:  # the engine's own words for each rank's end (who stopped it: the launcher or ddptui's teardown)
        for r in sorted(others):
            t.append(f"rank {r}: {others[r]}\n")
    else:  # a record from before CrashVerdict.outcomes: its groups
        for ranks, words in ((c.together, "failed at the same moment"), (c.victims, "failed after it"),
                             (c.stopped, "stopped by the launcher"), (c.never_started, "never started")):
            if ranks:
                t.append(f"{ranks_text(ranks, sort=False)}: {words}\n")
    if c.excerpt:
        t.append("\n")
        for line in c.excerpt:
            t.append(f"  {line}\n", style="red" if "Error" in line or "error" in line else "")
    return t


class CrashView(VerticalScroll):
    """Shows ``crash``, the engine's CrashVerdict (None: no crash)."""

    crash: reactive[CrashVerdict | None] = reactive(None, repaint=False, init=False)

    def compose(self):
        yield Static(render_crash(None), classes="crash-text")

    def watch_crash(self, crash: CrashVerdict | None) -> None:
        self.query_one(".crash-text", Static).update(render_crash(crash))
