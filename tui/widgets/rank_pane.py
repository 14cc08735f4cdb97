"""One rank's pane: status badge, progress bar, CPU/RSS and the newest log lines."""
from __future__ import annotations

import re
from dataclasses import dataclass

from textual.reactive import reactive

from ..marks import WARN, marked
from ..model import RankView, RunModel, human_bytes
from ..rate import fmt_samples_rate, fmt_step_time, phase_text, samples_rate
from ..search import Query
from .pane_body import PaneBody

_EXIT = re.compile(r"exit -?\d+")
BADGE_CLASSES = ("-running", "-slow", "-stalled", "-ok", "-failed", "-starting", "-killed")


def badge_class(rv: RankView) -> str:
    b = rv.badge()
    if b == "exited ok":
        return "-ok"
    if b.startswith("failed"):
        return "-failed"
    return "-" + b.split()[0] if ("-" + b.split()[0]) in BADGE_CLASSES else "-running"


def status_line(rv: RankView, steps: int | None, now: float | None = None) -> str:
    """'step 120/500 0.31 s/step  410 samples/s  loss 0.52  cpu 98%  rss 310M' (samples/s where the rank's model
    inputs told its batch); before its first step, its start-up phase and its seconds in it as of `now` (the model's
    newest event). The engine's words for a rank not running ('stopped by ddptui after the stall', 'steps take 0.50 s,
    ...') come first: a narrow pane cuts the end of the line, and the figures are what it can spare."""
    parts = []
    if rv.detail and rv.status not in ("running", "failed") and not _EXIT.fullmatch(rv.detail):
        parts.append(rv.detail)  # a failed rank's detail and an exit code are in its badge already
    elif rv.detail and rv.status == "running" and rv.step is None:
        parts.append(rv.detail)  # what is known of a running rank with no step to show ("output not readable")
    if rv.phase:
        parts.append(phase_text(rv.phase, rv.phase_since, now))
    if rv.step is not None:
        parts.append(f"step {rv.step}" + (f"/{steps}" if steps else "")
                     + (f" {fmt_step_time(rv.step_time)}" if rv.step_time is not None else ""))
    samples = samples_rate(rv)
    if samples is not None:
        parts.append(fmt_samples_rate(samples))
    if rv.loss is not None:
        parts.append(f"loss {rv.loss:.4g}")
    parts.append(f"cpu {rv.cpu:.0f}%" if rv.cpu is not None else "cpu -")
    parts.append(f"rss {human_bytes(rv.rss)}")
    return "  ".join(parts)


@dataclass(frozen=True)
class PaneShown:
    """What a pane draws around its tail, as values: a pane redraws only what differs."""

    title: str
    badge: str  # the status with its marker, and what the rank went through before it: "✓ exited ok · ⚠ was slow"
    cls: str
    status: str
    bar: tuple[int, int] | None  # (total, done) when the run has a step count; None: no bar


def pane_shown(rv: RankView, steps: int | None, now: float | None = None) -> PaneShown:
    where = rv.node or rv.host  # the node as its launcher names it (an old record's: the host)
    title = f"rank {rv.rank}" + (f" · pid {rv.pid}" if rv.pid else "") + (f" · {where}" if where else "")
    bar = None
    if steps:
        bar = (steps, min(rv.step or 0, steps))
    return PaneShown(title, badge_words(rv), badge_class(rv), status_line(rv, steps, now), bar)


def badge_words(rv: RankView) -> str:
    """"✓ exited ok · ⚠ was slow": the status with its marker, then what the rank went through that it no longer says."""
    past = rv.past(short=True)
    return marked(rv.badge()) + (f" · {WARN} {past}" if past else "")


def _quantum(bar: tuple[int, int] | None) -> tuple | None:
    """A bar is at most 200 cells wide: redrawn only when the step moves it by a cell or its total changes."""
    return None if bar is None else (bar[0], bar[1] * 200 // bar[0])


class RankPane(PaneBody, can_focus=True):
    """A rank's pane: its border (title and badge) around its status line, progress bar and newest lines, all one
    Line-API widget (pane_body.py). It was a container around that widget: two widgets a pane for Textual to lay out,
    send Show/Hide/Resize to and cut every line at, each time the grid is shown again.

    Focusable (digits / tab); z zooms the focused one. Shows ``shown``; ``bar_room`` says whether the run screen
    left it a row for the progress bar."""

    shown: reactive[PaneShown | None] = reactive(None, repaint=False, init=False)
    bar_room: reactive[bool] = reactive(True, repaint=False, init=False)

    def __init__(self, rank: int, **kw) -> None:
        super().__init__(id=f"rank-{rank}", classes="rank-pane -starting", **kw)
        self.rank = rank
        self._ready = False  # the screen may show it before it is mounted
        self._asked: tuple | None = None  # (model, needle, search) of a show() before mount: done on mount

    def on_mount(self) -> None:
        self.border_title = f"rank {self.rank}"
        self._ready = True
        if self._asked is not None:
            self.show(*self._asked)

    def show(self, model: RunModel, needle: str, search: Query | None = None) -> None:
        """Take the rank's state from the model: what differs from what is shown is redrawn; `needle` filters the
        lines, `search`'s matches are highlighted."""
        if not self._ready:
            self._asked = (model, needle, search)
            return
        rv = model.rank(self.rank)
        self.shown = pane_shown(rv, model.steps, model.last_wall)
        self.idle = model.phase_text(rv)  # instead of "(no output yet)" while it has no line
        self.set_search(search, self.rank)
        self.show_lines(rv.lines, model.start_wall, needle, rv.seq)

    def watch_shown(self, old: PaneShown | None, new: PaneShown | None) -> None:
        if not self._ready or new is None:
            return
        if old is None or old.title != new.title:  # setting a border title repaints the whole pane, even unchanged
            self.border_title = new.title
        if old is None or old.badge != new.badge:
            self.border_subtitle = new.badge  # "✗ failed (exit 1)": the status reads without colour
        if not self.has_class(new.cls):
            self.remove_class(*BADGE_CLASSES)
            self.add_class(new.cls)
        self.status = new.status
        if old is None or _quantum(old.bar) != _quantum(new.bar):
            self._draw_bar()

    def watch_bar_room(self) -> None:
        if self._ready:
            self._draw_bar()

    def _draw_bar(self) -> None:
        self.bar = self.shown.bar if self.shown is not None and self.bar_room else None

    def show_bar(self, room: bool) -> None:
        """Keep the progress bar row (room) or give it to the log lines."""
        self.bar_room = room
