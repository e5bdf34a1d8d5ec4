"""Asks before quitting while a run is still training."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Static


class ConfirmQuitScreen(ModalScreen[bool]):
    BINDINGS = [Binding("y,enter", "answer(True)", "stop & quit"), Binding("n,escape", "answer(False)", "keep training")]

    def compose(self) -> ComposeResult:
        with Vertical(id="quit-box", classes="dialog"):
            yield Static("Training is still running.\nStop it, save a final checkpoint and quit?")
            with Horizontal(classes="buttons"):
                yield Button("Stop & quit (y)", id="yes", variant="error")
                yield Button("Keep training (n)", id="no")

    def action_answer(self, answer: bool) -> None:
        self.dismiss(answer)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")
