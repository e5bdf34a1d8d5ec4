"""Asks before quitting while the run goes on: stop it, stop it and stay, leave it running, or cancel."""

from __future__ import annotations

from typing import Literal

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Static

QuitChoice = Literal["stop", "stay", "leave"]


class ConfirmQuitScreen(ModalScreen[QuitChoice | None]):
    """Dismissed with "stop" (stop the run, save a final checkpoint, quit), "stay" (stop it the same
    way and keep this dashboard on the finished run, every tab read-only), "leave" (quit, the run
    goes on; ``grpo-tui attach`` comes back to it) or None (cancel)."""

    BINDINGS = [
        Binding("y,s", "answer('stop')", "stop the run"),
        Binding("k", "answer('stay')", "stop, keep the dashboard"),
        Binding("l,d,enter", "answer('leave')", "leave it running"),
        Binding("n,c,escape", "answer(None)", "cancel"),
    ]

    def compose(self) -> ComposeResult:
        with Vertical(id="quit-box", classes="dialog"):
            yield Static(
                "Training is still running.\n"
                "Stop it (a final checkpoint is saved) and close or keep this dashboard, or leave it running and "
                "come back with grpo-tui attach?"
            )
            with Horizontal(classes="buttons"):  # two rows: four buttons do not fit the dialog's width
                yield Button("Stop the run (y)", id="stop", variant="error")
                yield Button("Stop and stay here (k)", id="stay", variant="warning")
            with Horizontal(classes="buttons"):
                yield Button("Leave it running (l)", id="leave", variant="primary")
                yield Button("Cancel (esc)", id="cancel")

    def action_answer(self, answer: QuitChoice | None) -> None:
        self.dismiss(answer)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        choice = event.button.id
        self.dismiss(choice if choice in ("stop", "stay", "leave") else None)  # type: ignore[arg-type]
