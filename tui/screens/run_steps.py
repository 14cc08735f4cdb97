"""The run screen's replay stepping (x X [ ] , . j): the record's model rebuilt at another event (tui/rewind.py) and
the whole screen redrawn as the run was then; where each key lands is tui/stepping.py's."""
from __future__ import annotations

from collections.abc import Sequence

from textual.widgets import Input

from ...runners import events as ev
from .. import stepping
from ..rewind import Rewind
from ..widgets.timeline import TimelineView

JUMP_HINT = f"jump to: {stepping.WHEN_SYNTAX}, enter"


class Cursor:
    """Where a stepped replay is: `pos`, the index of the last event folded into the screen's model."""

    def __init__(self, events: Sequence[ev.Event]) -> None:
        self.events = events
        self.walls = stepping.walls(events)
        self.incidents = stepping.incidents(events)
        self.rewind = Rewind(events)
        self.pos = len(events) - 1
        self.start = next((e.wall for e in events if isinstance(e, ev.RunStarted)), self.walls[0] if events else 0.0)

    def words(self) -> str:
        """'at +12.3s · event 45/161': where the screen is in the record."""
        return f"at +{max(0.0, self.walls[self.pos] - self.start):.1f}s · event {self.pos + 1}/{len(self.events)}"


class ReplaySteps:
    """Mixed into RunScreen: the stepping keys of a replay read to its end (other runs say where they work)."""

    cursor: Cursor | None = None

    def _stepping(self) -> Cursor | None:
        app = self.app  # type: ignore[attr-defined]
        if self.source_kind != "replay":  # type: ignore[attr-defined]
            self.notify("stepping is for records: ddptui replay RUN_DIR", severity="warning")  # type: ignore[attr-defined]
            return None
        if app.running:
            self.notify("still reading the record: step once it is read", severity="warning")  # type: ignore[attr-defined]
            return None
        if self.cursor is None:
            events = getattr(app.source, "events", None)
            if not events:
                self.notify("this record has no events to step through", severity="warning")  # type: ignore[attr-defined]
                return None
            self.cursor = Cursor(events)
        return self.cursor

    def go_to_event(self, target: int) -> None:
        """Show the run as it was once events[0..target] happened: a step forward folds the events in between into
        the model, a step back rebuilds it (tui/rewind.py); then every view is drawn again."""
        c = self.cursor
        assert c is not None  # _stepping made it
        model = self.model  # type: ignore[attr-defined]
        if target > c.pos:
            model.apply(c.events[c.pos + 1:target + 1])
        elif target < c.pos:
            model.restore(c.rewind.model_at(target))
            self.query_one(TimelineView).reset()  # type: ignore[attr-defined]
        model.take_changes()
        c.pos = target
        self._auto_switched.update(("crash", "stacks", "verdict"))  # type: ignore[attr-defined]  # the user steps
        self._hints_seen = len(model.hints)  # no toasts while stepping: the Hints tab has them
        self.show()  # type: ignore[attr-defined]
        self.show_search()  # type: ignore[attr-defined]  # the panes' new lines are searched too

    def action_incident(self, forward: bool) -> None:
        """x / X: the next (previous) stall, crash, divergence or node loss."""
        c = self._stepping()
        if c is None:
            return
        found = stepping.next_incident(c.incidents, c.pos, forward)
        if found is None:
            self.notify("no stall, crash, divergence or node loss in this record", severity="warning")  # type: ignore[attr-defined]
            return
        self.go_to_event(found.index)
        self.notify(f"{found.kind}: {c.words()}")  # type: ignore[attr-defined]

    def action_step_event(self, delta: int) -> None:
        """[ / ]: one event back / on."""
        c = self._stepping()
        if c is not None:
            self.go_to_event(stepping.step_event(len(c.events), c.pos, delta))

    def action_step_seconds(self, seconds: float) -> None:
        """, / .: one second back / on."""
        c = self._stepping()
        if c is not None:
            self.go_to_event(stepping.step_seconds(c.walls, c.pos, seconds))

    def action_jump(self) -> None:
        """j: a time typed in a box (HH:MM:SS, +SECONDS)."""
        if self._stepping() is None:
            return
        box = self.query_one("#jump", Input)  # type: ignore[attr-defined]
        box.disabled = False
        box.display = True
        box.value = ""
        box.border_subtitle = ""
        box.focus()

    def close_jump(self) -> None:
        box = self.query_one("#jump", Input)  # type: ignore[attr-defined]
        box.value = ""
        box.display = False
        box.disabled = True
        self.focus_rank_pane(None)  # type: ignore[attr-defined]

    def jump_entered(self, box: Input) -> None:
        """enter in the jump box: the last event at that time; a time that cannot be read is said in the box."""
        c = self.cursor
        assert c is not None  # the box opens once stepping works
        try:
            wall = stepping.parse_when(box.value, c.start)
        except ValueError as e:
            box.border_subtitle = str(e)  # the box stays open to be fixed
            return
        self.close_jump()
        self.go_to_event(stepping.index_at(c.walls, wall))
