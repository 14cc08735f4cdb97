"""The dashboard's redraw caps, in one place: under a flood of lines the screens hear of changes at most this often."""
from __future__ import annotations

from dataclasses import dataclass

from .model import Changes

VIEW_PERIOD = 0.25  # panes, tails, banner, tabs: 4 Hz at most (keys redraw at once, they do not wait for this)
CHART_PERIOD = 1.0  # the loss chart: plotext's drawing is the costly part


@dataclass
class RedrawCap:
    """Leading-edge throttle: the first change after a quiet spell goes out at once, the rest at the cap."""

    view_at: float = float("-inf")  # when the screens were last told
    chart_at: float = float("-inf")  # when they were last told of new losses

    def due(self, changes: Changes, now: float, final: bool = False) -> tuple[Changes, float | None]:
        """(what to tell the screens now, seconds until the rest is due or None when nothing is held back).

        ``changes`` keeps what is held back. ``final``: the run ended, everything goes out now."""
        if not changes:
            return Changes(), None
        if not final and now - self.view_at < VIEW_PERIOD:
            return Changes(), self.view_at + VIEW_PERIOD - now
        out = changes.copy()
        changes.ranks.clear()
        changes.coll.clear()
        changes.lines = changes.run = False
        self.view_at = now
        if changes.loss and not final and now - self.chart_at < CHART_PERIOD:
            out.loss = False  # stays in `changes` until its own period has passed
            return out, self.chart_at + CHART_PERIOD - now
        if changes.loss:
            self.chart_at = now
        changes.loss = False
        return out, None

    def chart_now(self, now: float) -> bool:
        """Whether the chart may be drawn now, out of turn (it shows again after a key): the cap still holds."""
        if now - self.chart_at < CHART_PERIOD:
            return False
        self.chart_at = now
        return True
