"""The merged timeline: every rank's lines in read-time order, tagged with the rank, filterable."""
from __future__ import annotations

from textual.widgets import Log

from tui.model import RunModel

SHOWN = 2000  # lines written on a full redraw; the model keeps more


def timeline_text(model: RunModel, item) -> str:
    w, r, s, t = item
    who = "launcher" if r is None else f"rank {r}"
    return f"{model.rel(w):9.3f} {who:>8} {'!' if s == 'err' else ' '} {t}"


class TimelineView(Log):
    """Incremental: appends what arrived since the last tick; a filter change redraws from the buffer."""

    def __init__(self, **kw) -> None:
        super().__init__(max_lines=SHOWN * 2, auto_scroll=True, **kw)
        self._seq = 0
        self._needle = None

    def update_from(self, model: RunModel, needle: str) -> None:
        needle = needle.lower()
        if needle != self._needle:
            self._needle = needle
            self.clear()
            self._seq = model.timeline_seq - len(model.timeline)
        new = model.timeline_seq - self._seq
        if new <= 0:
            return
        items = list(model.timeline)[-min(new, len(model.timeline), SHOWN):]
        self._seq = model.timeline_seq
        lines = [timeline_text(model, it) for it in items]
        if needle:
            lines = [x for x in lines if needle in x.lower()]
        if lines:
            self.write_lines(lines)
