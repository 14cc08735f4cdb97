"""The one-line run banner: stall with the hang sentence, crash root cause, or the final status."""
from __future__ import annotations

import re

from rich.text import Text
from textual.reactive import reactive
from textual.widgets import Static

from ddptui.tui.marks import mark
from ddptui.tui.model import RunModel
from ddptui.tui.widgets.verdict_view import own_exit, preflight_problems, replica_line

KINDS = ("-stall", "-crash", "-ok", "-failed", "-info")
_NAMES_RANKS = re.compile(r"ranks? \d")  # a verdict that begins with its ranks: "rank 1 is stuck in ..."


def banner_text(model: RunModel) -> tuple[str, str]:
    """(css class, text) for the current state; ("", "") hides the banner."""
    f = model.finished
    if model.lost:  # the cause of what follows (its ranks' deaths, the crash verdict): said first
        return "-crash", " · ".join(f"NODE LOST {n.node} ({_ranks(n.ranks)}): {n.why}" for n in model.lost)
    if model.crash is not None:
        c = model.crash
        return "-crash", f"CRASH {c.exit}: {c.text}"
    if model.stall is not None:
        if model.stall_hang is not None:  # this stall's verdict, never an ended stall's
            hv = model.stall_hang
            if hv.culprits and not _NAMES_RANKS.match(hv.text):  # a Flight Recorder finding leads with the collective:
                return "-stall", f"STALL: {_ranks(hv.culprits)} · {hv.text}"  # who, before a long sentence is cut
            return "-stall", f"STALL: {hv.text}"
        s = model.stall
        ranks = ",".join(map(str, s.stalled))
        said = s.reason or f"made no progress for {s.threshold:g}s"
        return "-stall", f"STALL: rank {ranks}: {said}; collecting stacks…"
    if f is not None:
        text = f"{mark(f.status) or '·'} run {f.status} (exit code {f.exit_code})"  # the marker: reads without colour
        problems = preflight_problems(model)
        if problems:  # why it never started: the reason, not only the status (its launcher lines are in the Timeline)
            first = problems[0]
            text += f": {first.get('message', '?')}" + (f" (fix: {first['fix']})" if first.get("fix") else "")
            if len(problems) > 1:
                text += f" · {len(problems) - 1} more in the Verdict tab"
        own = own_exit(model)
        if own:  # the ranks chose their exit status (no crash): what they said
            text += f": {own}"
        if model.replica is not None:
            text += f" · {replica_line(model.replica)}"
        return ("-ok" if f.status == "ok" else "-failed"), text
    sample = model.slow  # the engine's stack sample of the slowed run: its sentence names the culprits' numbers
    named = set(sample.culprits) if sample is not None else set()
    slow = [f"rank {r}: {v.detail}" for r, v in sorted(model.ranks.items())
            if v.status == "slow" and v.detail and r not in named]
    if slow or sample is not None:
        return "-info", "SLOW: " + " · ".join(slow + ([sample.text] if sample is not None else []))
    return "", ""


def _ranks(rs: tuple[int, ...]) -> str:
    if not rs:
        return "no ranks"
    return f"rank {rs[0]}" if len(rs) == 1 else "ranks " + ",".join(map(str, rs))


class Banner(Static):
    """Shows ``state`` = banner_text(model): set it on every change, it redraws only when it differs."""

    state: reactive[tuple[str, str]] = reactive(("", ""), repaint=False)

    def __init__(self, **kw) -> None:
        super().__init__("", **kw)
        self.display = False

    def watch_state(self, state: tuple[str, str]) -> None:
        cls, text = state
        self.display = bool(text)
        self.remove_class(*KINDS)
        if cls:
            self.add_class(cls)
        self.update(Text(text))
