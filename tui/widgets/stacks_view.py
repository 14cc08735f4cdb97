"""Stacks of every rank and thread from the latest collection, and the engine's verdict when it was read from them."""
from __future__ import annotations

import os
import time

from rich.text import Text
from textual.containers import VerticalScroll
from textual.reactive import reactive
from textual.widgets import Static

from ddptui.runners.events import HangVerdict, StacksCollected
from ddptui.runners.stacks import HELPER_THREAD
from ddptui.runners.hang_verdict import collective_frame


def _verdict_of(stacks: StacksCollected, hang: HangVerdict | None) -> HangVerdict | None:
    """The engine's verdict when it was read from these very stacks; an on-request dump of a healthy run has none.
    Records written before verdicts named their stacks folder: a verdict with a ``where`` was read from stacks."""
    if hang is None:
        return None
    return hang if (hang.path == stacks.path if hang.path else bool(hang.where)) else None


def _where_line(w: dict) -> str:
    wk = w.get("worker") or {}
    if wk.get("busy"):
        return (f"   waits for its {wk.get('label')}: {wk.get('func')}() at {os.path.basename(str(wk.get('file')))}:"
                f"{wk.get('line')}" + (f" (calls {wk['calls']})" if wk.get("calls") else ""))
    at = f"{os.path.basename(str(w.get('file')))}:{w.get('line')}" if w.get("file") else "?"
    return (f"   {w.get('category', '?')}: {w.get('detail', '')} · {w.get('func') or '?'}() at {at}"
            + (f" (calls {w['calls']})" if w.get("calls") else "")
            + (f"  step {w['step']}" if w.get("step") is not None else ""))


def _frames(t: Text, frames: list, where: dict) -> None:
    """The frames of one thread: ▶ a collective (the engine's own test, runners/hang_verdict.py), ◀ where the
    engine's verdict (HangVerdict.where) says a culprit sits."""
    for fr in frames:
        func, file, line = (list(fr) + ["?", "?", "?"])[:3]
        named = bool(where) and str(file) == str(where.get("file")) and str(line) == str(where.get("line"))
        if collective_frame(str(func), str(file)) or (named and where.get("category") in ("collective", "xla")):
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


def _threads(t: Text, threads: list, where: dict, indent: str = "  ") -> None:
    # ddptui's own helper thread goes last whatever order a (replayed) record holds
    for th in sorted(threads, key=lambda th: bool(th.get("helper") or th.get("thread") == HELPER_THREAD)):
        helper = bool(th.get("helper") or th.get("thread") == HELPER_THREAD)
        idle = " (idle)" if th.get("idle") else ""
        label = " (ddptui's own helper thread)" if helper else ""
        t.append(f"{indent}thread {th.get('thread', '?')}{idle}{label}\n", style="dim" if idle or helper else "cyan")
        _frames(t, th.get("frames", []), where if not where.get("thread") or th.get("thread") == where["thread"] else {})


def render_stacks(stacks: StacksCollected | None, hang: HangVerdict | None = None) -> Text:
    if stacks is None:
        return Text("No stacks collected yet: press d to dump every rank's stacks now.", style="dim")
    t = Text()
    hang = _verdict_of(stacks, hang)
    if hang is not None:
        t.append(f"{hang.text}\n", style="bold yellow")
        t.append(f"culprits: {', '.join(map(str, hang.culprits)) or '-'}   "
                 f"waiting in a collective: {', '.join(map(str, hang.waiting)) or '-'}\n\n")
    elif getattr(stacks, "why", "stall") == "on request":
        t.append(f"Stacks taken on request at {time.strftime('%H:%M:%S', time.localtime(stacks.wall))}: "
                 "no rank is stalled, so no verdict.\n\n", style="bold")
    t.append(f"collected in {stacks.seconds:.2f}s → {stacks.path}\n", style="dim")
    culprits = set(hang.culprits) if hang else set()
    workers = getattr(stacks, "workers", None) or {}
    for r in sorted(set(stacks.threads) | set(stacks.method)):
        role = " (culprit)" if r in culprits else (" (waiting)" if hang and r in hang.waiting else "")
        t.append(f"\n━━ rank {r}{role} · {stacks.method.get(r, '?')}\n", style="bold red" if role == " (culprit)" else "bold")
        where = (hang.where.get(r) or {}) if hang else {}
        if where:
            t.append(_where_line(where) + "\n", style="italic")
        _threads(t, stacks.threads.get(r, []), where)
        wk = where.get("worker") or {}
        for w in workers.get(r, []):
            named = w.get("pid") == wk.get("pid")
            label = f"DataLoader worker {w['worker_id']}" if w.get("worker_id") is not None else "worker process"
            t.append(f"  ── {label} (pid {w.get('pid')}) · {w.get('method', '?')}{'  (the one it waits for)' if named else ''}\n",
                     style="bold red" if named else "bold")
            _threads(t, w.get("threads", []), {**wk, "thread": "MainThread"} if named else {}, indent="    ")
    return t


class StacksView(VerticalScroll):
    """Shows ``shown``: (the latest StacksCollected, the verdict read from stacks), as the model keeps them."""

    shown: reactive[tuple] = reactive((None, None), repaint=False, init=False)

    def compose(self):
        yield Static(render_stacks(None), classes="stacks-text")

    def watch_shown(self, shown: tuple) -> None:
        self.query_one(".stacks-text", Static).update(render_stacks(*shown))
