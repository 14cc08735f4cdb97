"""Stacks of every rank and thread from the latest collection, collective frames highlighted."""
from __future__ import annotations

from rich.text import Text
from textual.containers import VerticalScroll
from textual.widgets import Static

from runners.events import HangVerdict, StacksCollected
from tui.model import is_collective


def render_stacks(stacks: StacksCollected | None, hang: HangVerdict | None = None) -> Text:
    if stacks is None:
        return Text("No stacks collected yet: press d to dump every rank's stacks now.", style="dim")
    t = Text()
    if hang is not None:
        t.append(f"{hang.text}\n", style="bold yellow")
        t.append(f"culprits: {', '.join(map(str, hang.culprits)) or '-'}   "
                 f"waiting in a collective: {', '.join(map(str, hang.waiting)) or '-'}\n\n")
    t.append(f"collected in {stacks.seconds:.2f}s → {stacks.path}\n", style="dim")
    culprits = set(hang.culprits) if hang else set()
    for r in sorted(set(stacks.threads) | set(stacks.method)):
        role = " (culprit)" if r in culprits else (" (waiting)" if hang and r in hang.waiting else "")
        t.append(f"\n━━ rank {r}{role} · {stacks.method.get(r, '?')}\n", style="bold red" if role == " (culprit)" else "bold")
        if hang and r in hang.where:
            w = hang.where[r]
            t.append(f"   {w.get('category', '?')}: {w.get('func', '?')} at {w.get('file', '?')}:{w.get('line', '?')}"
                     f"{'  step ' + str(w['step']) if w.get('step') is not None else ''}\n", style="italic")
        where = (hang.where.get(r) or {}) if hang else {}
        for th in stacks.threads.get(r, []):
            idle = " (idle)" if th.get("idle") else ""
            t.append(f"  thread {th.get('thread', '?')}{idle}\n", style="dim" if idle else "cyan")
            for fr in th.get("frames", []):
                func, file, line = (list(fr) + ["?", "?", "?"])[:3]
                named = bool(where) and str(file) == str(where.get("file")) and str(line) == str(where.get("line"))
                hit = is_collective(str(func), str(file)) or (named and where.get("category") == "collective")
                if hit:
                    t.append("  ▶ ", style="bold magenta")
                    t.append(f"{func}", style="bold magenta")
                    t.append(f"  {file}:{line}", style="magenta")
                elif named:  # where the verdict says a culprit sits
                    t.append("  ◀ ", style="bold yellow")
                    t.append(f"{func}", style="bold yellow")
                    t.append(f"  {file}:{line}", style="yellow")
                else:
                    t.append(f"    {func}")
                    t.append(f"  {file}:{line}", style="dim")
                t.append("\n")
    return t


class StacksView(VerticalScroll):
    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self._drawn = None

    def compose(self):
        yield Static(render_stacks(None), classes="stacks-text")

    def update_from(self, model) -> None:
        key = (id(model.stacks), id(model.hang))
        if key == self._drawn:
            return
        self._drawn = key
        self.query_one(".stacks-text", Static).update(render_stacks(model.stacks, model.hang))
