"""Asks before stopping a job ddptui attached to: says what stop would do (its launcher, scancel, or nothing)."""
from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Static


class ConfirmStopJob(ModalScreen[bool]):
    BINDINGS = [Binding("y,enter", "answer(True)", "stop the job"), Binding("n,escape", "answer(False)", "keep it")]

    def __init__(self, what: str, can: bool) -> None:
        super().__init__()
        self.what, self.can = what, can

    def compose(self) -> ComposeResult:
        with Vertical(id="confirm-box"):
            if self.can:
                yield Static(f"This job is not ddptui's. Stop it? ddptui would send {self.what}.", id="confirm-text",
                             markup=False)
            else:
                yield Static(f"ddptui cannot stop this job: it would signal {self.what}.", id="confirm-text",
                             markup=False)
            with Horizontal(id="confirm-buttons"):
                if self.can:
                    yield Button("Stop the job (y)", variant="error", id="yes")
                yield Button("Keep it running (n)", id="no")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes and self.can)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")
