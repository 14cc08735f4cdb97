"""The `?` help screen: every key of the dashboard."""
from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Static

KEYS = (
    ("q", "quit (asks first while a run is live; stops every rank and waits)"),
    ("s", "stop the run (every rank torn down)"),
    ("d", "dump the stacks of every rank now"),
    ("r", "rerun the same profile (when the run has ended)"),
    ("t", "toggle the merged timeline of all ranks"),
    ("/", "filter log lines by substring (escape clears)"),
    ("0-9", "focus that rank's pane"),
    ("tab", "next pane"),
    ("z", "zoom the focused rank full screen (z / escape back)"),
    ("k o c h v", "stacks, collectives, crash, hints, verdict tabs"),
    ("escape", "back: clear filter, back to the grid, back to the profile picker"),
    ("?", "this help"),
)


class HelpScreen(ModalScreen):
    BINDINGS = [Binding("escape,question_mark,q", "app.pop_screen", "close")]

    def compose(self) -> ComposeResult:
        with Vertical(id="help-box"):
            yield Static("ddptui keys", id="help-title")
            yield Static("\n".join(f"{k:>8}  {v}" for k, v in KEYS), id="help-keys", markup=False)
            yield Static("escape closes", classes="dim")
