"""Asks before quitting while ranks are still running (and, in a browser's viewer, before stopping the run)."""
from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Static


class ConfirmQuit(ModalScreen[bool]):
    BINDINGS = [Binding("y,enter", "answer(True)", "stop and quit"), Binding("n,escape", "answer(False)", "keep running")]

    def __init__(self, question: str = "The run is still live. Stop every rank and quit?",
                 yes: str = "Stop and quit (y)") -> None:
        super().__init__()
        self.question, self.yes = question, yes

    def compose(self) -> ComposeResult:
        with Vertical(id="confirm-box"):
            yield Static(self.question, id="confirm-text", markup=False)
            with Horizontal(id="confirm-buttons"):
                yield Button(self.yes, variant="error", id="yes")
                yield Button("Keep running (n)", id="no")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")
