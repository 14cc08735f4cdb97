"""Asks before quitting while ranks are still running."""
from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Static


class ConfirmQuit(ModalScreen[bool]):
    BINDINGS = [Binding("y,enter", "answer(True)", "stop and quit"), Binding("n,escape", "answer(False)", "keep running")]

    def compose(self) -> ComposeResult:
        with Vertical(id="confirm-box"):
            yield Static("The run is still live. Stop every rank and quit?", id="confirm-text")
            with Horizontal(id="confirm-buttons"):
                yield Button("Stop and quit (y)", variant="error", id="yes")
                yield Button("Keep running (n)", id="no")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")
