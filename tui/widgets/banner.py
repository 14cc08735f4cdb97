"""The run banner: a node lost, the crash root cause, a stall with its fix, a slow-down, or the final status with every
verdict the run had; cut after its last whole clause that fits its rows."""
from __future__ import annotations

import re

from rich.text import Text
from textual.reactive import reactive
from textual.widgets import Static

from ...runners.evidence.words import rank_list, ranks_text
from ..marks import mark
from ..model import RunModel
from ..verdicts import slow_text
from .verdict_view import own_exit, preflight_problems, replica_line

KINDS = ("-stall", "-crash", "-ok", "-failed", "-info")
_NAMES_RANKS = re.compile(r"ranks? \d")  # a verdict that begins with its ranks: "rank 1 is stuck in ..."
_CLAUSE = re.compile(r"; | · |, ")
ROWS = 3  # the banner's most rows (app.tcss: max-height)
MORE = " … (v: all of it)"


def banner_text(model: RunModel) -> tuple[str, str]:
    """(css class, text) for the current state; ("", "") hides the banner. The cause leads (a node lost, the crash, a
    stall, else the finished run's status); once the run is over every other verdict it had follows (a slow-down, a
    stall that ended, replicas that differ), as summary.json keeps them."""
    f = model.finished
    cls, parts = "", []
    if model.lost:  # the cause of what follows (its ranks' deaths, the crash verdict): said first
        cls, parts = "-crash", [" · ".join(f"NODE LOST {n.node} ({_ranks(n.ranks)}): {n.why}" for n in model.lost)]
    elif model.crash is not None:
        c = model.crash
        cls, parts = "-crash", [f"CRASH {c.exit}: {c.text}"]
    elif model.stall is not None:
        cls, parts = "-stall", [_stall(model)]
    elif model.diverged is not None and f is None:
        cls, parts = "-crash", [f"REPLICAS DIVERGED: {model.diverged.text}"]
    elif f is not None:
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
        cls, parts = ("-ok" if f.status == "ok" else "-failed"), [text]
    slow = slow_text(model) if f is not None else slow_now(model)
    if slow and (f is not None or not parts):  # live, the alarm of the moment alone; at the end, every verdict
        parts.append("SLOW: " + slow)
        cls = cls or "-info"
    if f is not None:
        if model.stall is None and model.hang is not None:  # a stall the ranks came out of: still a verdict of the run
            parts.append("STALLED, then the ranks moved on: " + model.hang.text)
        if model.diverged is not None:  # the live check's word: when they began to differ
            parts.append(f"REPLICAS DIVERGED: {model.diverged.text}")
        rep = model.replica
        if rep is not None and (cls in ("-ok", "-failed") or rep.status == "differ"):
            parts.append(replica_line(rep))
        if cls == "-ok" and len(parts) > 1 and (slow or model.hang is not None):
            cls = "-info"  # ok, but not without a warning
    return cls, " · ".join(parts)


def slow_now(model: RunModel) -> str:
    """Live, the slow-down that holds now: the ranks slow now with their words, then the stack sample's sentence until
    a slow rank is back at pace (RunModel.slow_over); "" when none is. The verdict stays the run's (slow_text)."""
    sample = model.slow if not model.slow_over else None
    named = set(sample.culprits) if sample is not None else set()
    ranks = [f"rank {r}: {v.detail}" for r, v in sorted(model.ranks.items())
             if v.status == "slow" and v.detail and r not in named]
    return " · ".join(ranks + ([sample.text] if sample is not None else []))


def _stall(model: RunModel) -> str:
    """"STALL: who · what holds them · fix: ... · the rest of the verdict": the engine's fix after the verdict's lead
    clause, so a banner cut to its rows still says what to do."""
    hv = model.stall_hang
    if hv is None:
        s = model.stall
        assert s is not None  # the banner's stall line is asked for only while a stall stands
        said = s.reason or f"made no progress for {s.threshold:g}s"
        return f"STALL: rank {rank_list(s.stalled, ',')}: {said}; collecting stacks…"
    text = hv.text
    if hv.fix:
        lead, sep, rest = text.partition("; ")
        text = f"{lead} · fix: {hv.fix}" + (f" · {rest}" if sep else "")
    if hv.culprits and not _NAMES_RANKS.match(hv.text):  # a Flight Recorder finding leads with the collective:
        return f"STALL: {_ranks(hv.culprits)} · {text}"  # who, before a long sentence is cut
    return f"STALL: {text}"


def fit(text: str, width: int, rows: int) -> str:
    """The text as it fits `rows` rows of `width` cells: whole when it does, else cut after the last clause that fits
    ("; ", " · " or ", "), never mid-word, and saying where the rest is."""
    if width <= 0 or _rows(text, width) <= rows:
        return text
    cuts = [m.start() for m in _CLAUSE.finditer(text)]
    for end in reversed(cuts):
        shown = text[:end] + MORE
        if _rows(shown, width) <= rows:
            return shown
    words = text.split(" ")
    for n in range(len(words) - 1, 0, -1):
        shown = " ".join(words[:n]) + MORE
        if _rows(shown, width) <= rows:
            return shown
    return MORE.strip()


def _rows(text: str, width: int) -> int:
    from rich.console import Console
    return len(Text(text).wrap(Console(width=width, legacy_windows=False, color_system=None), width))


class Banner(Static):
    """Shows ``state`` = banner_text(model): set it on every change, it redraws only when it differs. A text longer than
    its rows is cut after its last whole clause that fits (`fit`), and says that the Verdict tab has all of it."""

    state: reactive[tuple[str, str]] = reactive(("", ""), repaint=False)

    def __init__(self, **kw) -> None:
        super().__init__("", **kw)
        self.display = False
        self._shown: tuple[str, int] | None = None  # (text, width) last fitted

    def watch_state(self, state: tuple[str, str]) -> None:
        cls, text = state
        self.display = bool(text)
        self.remove_class(*KINDS)
        if cls:
            self.add_class(cls)
        self._fit()

    def on_resize(self) -> None:
        self._fit()

    def _fit(self) -> None:
        text, width = self.state[1], self.content_size.width
        if self._shown == (text, width):
            return
        self._shown = (text, width)
        self.update(Text(fit(text, width, ROWS)))


def _ranks(rs: tuple[int, ...]) -> str:
    """The banner's short form: the event's order, "," between numbers, "no ranks" for none."""
    return ranks_text(rs, sort=False, empty="no ranks", sep=",")
