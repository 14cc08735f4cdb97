"""Stacks of every rank and thread from the latest collection, and the engine's verdict when it was read from them."""
from __future__ import annotations

import os
import time

from rich.text import Text
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.reactive import reactive
from textual.widgets import Static

from ...runners.events import HangVerdict, StacksCollected
from ...runners.evidence.hang_verdict import collective_frame
from ...runners.evidence.stack_types import HELPER_THREADS
from ...runners.evidence.words import ranks_text


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
    """The frames of one thread: ▶ a collective (the engine's own test, runners/evidence/hang_verdict.py), ◀ where the
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


def _helper(th: dict) -> bool:
    """One of ddptui's own threads in the rank (stacks.is_helper decided it when they were taken; older records: by
    name)."""
    return bool(th.get("helper") or th.get("thread") in HELPER_THREADS)


def _threads(t: Text, threads: list, where: dict, indent: str = "  ") -> None:
    """The rank's own threads, then ddptui's own helper threads folded into one line (their frames are in the stacks
    file): they are never the user's problem and took a dozen rows of every rank."""
    helpers = [th for th in threads if _helper(th)]
    for th in threads:
        if _helper(th):
            continue
        idle_tag = " (idle)" if th.get("idle") else ""
        t.append(f"{indent}thread {th.get('thread', '?')}{idle_tag}\n", style="dim" if idle_tag else "cyan")
        _frames(t, th.get("frames", []), where if not where.get("thread") or th.get("thread") == where["thread"] else {})
    if helpers:
        frames = sum(len(th.get("frames") or ()) for th in helpers)
        idle = all(th.get("idle") for th in helpers)
        t.append(f"{indent}ddptui's own threads: {', '.join(str(th.get('thread', '?')) for th in helpers)}"
                 f" ({'idle, ' if idle else ''}{frames} frame{'' if frames == 1 else 's'} folded: the stacks file has "
                 "them)\n", style="dim")


def in_collective(hang: HangVerdict) -> list[int]:
    """Ranks whose frame the verdict places in a collective: its waiting ranks, and a culprit that waits in one too
    (a side of a mismatch); from the verdict's per-rank ``where`` (keys are strings in a replayed record)."""
    return sorted(set(hang.waiting) | {int(r) for r, w in (hang.where or {}).items()
                                       if (w or {}).get("category") in ("collective", "xla")})


def roles_line(hang: HangVerdict) -> str:
    """Who the verdict blames and who waits, as rank numbers said as ranks ("rank 0"), never a bare "0" that reads
    as a count."""
    return f"culprits: {ranks_text(hang.culprits, empty='none')}   waiting in a collective: {ranks_text(in_collective(hang), empty='none')}"


def rank_sections(plain: str) -> list[tuple[int, int, int]]:
    """(rank, first line, end line) of each rank's part of the rendered stacks (its "━━ rank N" header on)."""
    lines = plain.split("\n")
    starts = [(i, int(ln.split()[2])) for i, ln in enumerate(lines) if ln.startswith("━━ rank ")]
    return [(r, i, starts[k + 1][0] if k + 1 < len(starts) else len(lines)) for k, (i, r) in enumerate(starts)]


def display_rows(lines: list[str], width: int) -> list[int]:
    """How many rows each line takes in a view `width` cells wide (Static wraps long lines at words, as rich does)."""
    from rich.console import Console
    console = Console(width=max(width, 1), legacy_windows=False, color_system=None)
    return [max(1, len(Text(ln).wrap(console, max(width, 1)))) for ln in lines]


def line_at_row(rows: list[int], row: int) -> int:
    """The line shown at display row `row` (its rows from display_rows)."""
    seen = 0
    for i, n in enumerate(rows):
        seen += n
        if row < seen:
            return i
    return max(len(rows) - 1, 0)


def section_at(sections: list[tuple[int, int, int]], top: int, prefer: tuple[int, ...] = ()) -> tuple[int, int, int] | None:
    """The rank's section the view's top line is in; above the first rank (the verdict), the first culprit's."""
    inside = [s for s in sections if s[1] <= top]
    if inside:
        return inside[-1]
    first = [s for s in sections if s[0] in prefer] or sections
    return first[0] if first else None


def rank_order(ranks, hang: HangVerdict | None) -> list[int]:
    """The culprits first (in the verdict's order), then the ranks waiting for them, then the rest by rank: at 80x24
    the culprit's stack is the first thing under the verdict, not 40 rows down."""
    ranks = set(ranks)
    first = [r for r in (hang.culprits if hang else ()) if r in ranks]
    then = [r for r in sorted(hang.waiting if hang else ()) if r in ranks and r not in first]
    return first + then + sorted(ranks - set(first) - set(then))


def stack_file(stacks: StacksCollected, rank: int | None) -> str:
    """Where the stacks are in the run record: the rank's file, or the folder for every rank."""
    folder = stacks.path.rstrip("/")
    return f"{folder}/rank{rank}.txt" if rank is not None else f"{folder}/"


def render_stacks(stacks: StacksCollected | None, hang: HangVerdict | None = None) -> Text:
    if stacks is None:
        return Text("No stacks collected yet: press d to dump every rank's stacks now.", style="dim")
    t = Text()
    hang = _verdict_of(stacks, hang)
    if hang is not None:
        t.append(f"{hang.text}\n", style="bold yellow")
        t.append(roles_line(hang) + "\n\n")
    elif getattr(stacks, "why", "stall") == "on request":
        t.append(f"Stacks taken on request at {time.strftime('%H:%M:%S', time.localtime(stacks.wall))}: "
                 "no rank is stalled, so no verdict.\n\n", style="bold")
    t.append(f"collected in {stacks.seconds:.2f}s → {stacks.path}   (y copies the rank at the top of the view, "
             "Y every rank)\n", style="dim")
    culprits = set(hang.culprits) if hang else set()
    workers = getattr(stacks, "workers", None) or {}
    for r in rank_order(set(stacks.threads) | set(stacks.method), hang):
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

    BINDINGS = [Binding("y", "copy", "copy this rank's stacks", show=False),
                Binding("Y", "copy(True)", "copy every rank's stacks", show=False)]

    shown: reactive[tuple] = reactive((None, None), repaint=False, init=False)

    def compose(self):
        yield Static(render_stacks(None), classes="stacks-text")

    def watch_shown(self, shown: tuple) -> None:
        self.query_one(".stacks-text", Static).update(render_stacks(*shown))

    def action_copy(self, every: bool = False) -> None:
        """The stacks as text to the clipboard (Textual's copy_to_clipboard: OSC 52, through tmux and ssh)."""
        stacks, hang = self.shown
        if stacks is None:
            self.app.notify("no stacks to copy yet: d dumps every rank's stacks", severity="warning")
            return
        plain = render_stacks(stacks, hang).plain
        lines = plain.split("\n")
        hang = _verdict_of(stacks, hang)
        top = line_at_row(display_rows(lines, self.query_one(".stacks-text", Static).content_size.width),
                          round(self.scroll_y))
        part = None if every else section_at(rank_sections(plain), top, hang.culprits if hang else ())
        if part is None:
            text, what, rank = plain, "every rank's stacks", None
        else:
            rank, a, b = part
            text, what = "\n".join(lines[a:b]).strip("\n") + "\n", f"rank {rank}'s stacks"
        self.app.copy_to_clipboard(text)
        # OSC 52 gets no answer: a terminal that drops it (tmux without set-clipboard, many over ssh) says nothing,
        # so the toast cannot know it worked and names the file that has the same stacks
        self.app.notify(f"copied {what} to the clipboard ({text.count(chr(10))} lines) by OSC 52, if the terminal "
                        f"allows it; the same stacks are in {stack_file(stacks, rank)}", title="stacks", timeout=10)
