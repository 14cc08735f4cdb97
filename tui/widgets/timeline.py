"""The merged timeline: every rank's lines in read-time order, tagged with the rank, filterable."""
from __future__ import annotations

from textual.widgets import Log

from ddptui.tui.model import RunModel
from ddptui.tui.ranktag import untagged

SHOWN = 2000  # lines kept in the widget; the model keeps more
PER_TICK = 400  # at most this many new lines drawn per redraw: beyond that nobody reads them, a marker says so


def timeline_text(model: RunModel, item) -> str:
    w, r, s, t = item
    who = "launcher" if r is None else f"rank {r}"
    return f"{model.rel(w):9.3f} {who:>8} {'!' if s == 'err' else ' '} {untagged(r, t)}"


class TimelineView(Log):
    """Incremental: appends what arrived since it was last shown (its cursor into the model's stream of lines);
    a filter change redraws from the buffer."""

    def __init__(self, **kw) -> None:
        super().__init__(max_lines=SHOWN * 2, auto_scroll=True, **kw)
        self._seq = 0
        self._needle = None

    def on_mount(self) -> None:
        # Follow the newest line through resizes too (the end banner, a smaller terminal), not only through
        # writes; scrolling up releases it, scrolling back to the bottom takes it again.
        self.anchor()

    def show(self, model: RunModel, needle: str) -> None:
        needle = needle.lower()
        if needle != self._needle:
            self._needle = needle
            self.clear()
            self._seq = model.timeline_seq - len(model.timeline)
        new = model.timeline_seq - self._seq
        if new <= 0:
            return
        self._seq = model.timeline_seq
        if needle:
            items = [it for it in list(model.timeline)[-min(new, len(model.timeline)):] if needle in it[3].lower()
                     or needle in (f"rank {it[1]}" if it[1] is not None else "launcher")]
        else:
            items = list(model.timeline)[-min(new, len(model.timeline), PER_TICK + 1):]
        lines = [timeline_text(model, it) for it in items[-PER_TICK:]]
        if len(items) > PER_TICK or (not needle and new > PER_TICK):
            skipped = (new if not needle else len(items)) - PER_TICK
            lines.insert(0, f"{'':9} {'':>8}   … {skipped} lines skipped (filter with / or zoom a rank to read them)")
        if lines:
            self.write_lines(lines)
