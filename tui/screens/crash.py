"""The worker crashed: count down to a restart that resumes from the latest checkpoint."""

from __future__ import annotations

import math
from collections.abc import Callable

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Static

from grpo_tui.tui.inert import clean


class CrashScreen(ModalScreen[bool]):
    """Dismissed with True to restart (now or when the countdown ends), False to cancel."""

    BINDINGS = [Binding("enter,R", "answer(True)", "restart now"), Binding("escape,c", "answer(False)", "cancel")]

    def __init__(
        self, code: int, attempt: int, max_restarts: int, delay_s: float, clock: Callable[[], float],
        last_error: str = "",
    ) -> None:
        super().__init__()
        self.code, self.attempt, self.max_restarts = code, attempt, max_restarts
        self.clock, self.deadline, self.last_error = clock, clock() + delay_s, last_error

    @property
    def remaining(self) -> float:
        return self.deadline - self.clock()

    def compose(self) -> ComposeResult:
        with Vertical(id="crash-box", classes="dialog"):
            yield Static(id="crash-text")
            with Horizontal(classes="buttons"):
                yield Button("Restart now (enter)", id="restart", variant="warning")
                yield Button("Cancel (esc)", id="cancel")

    def on_mount(self) -> None:
        self._render_text()
        self._timer = self.set_interval(0.1, self._tick)

    def _render_text(self) -> None:
        text = Text()
        text.append(f"✗ The worker exited with code {self.code}.\n", "bold red")
        if self.last_error:
            text.append(clean(self.last_error, single_line=True)[:300] + "\n", "red")
        text.append(f"\nRestarting from the latest checkpoint in {math.ceil(self.remaining)} s ")
        text.append(f"(attempt {self.attempt} of {self.max_restarts}).", "dim")
        self.query_one("#crash-text", Static).update(text)

    def _tick(self) -> None:
        if self.remaining <= 0:
            self._timer.stop()
            self.dismiss(True)
        else:
            self._render_text()

    def action_answer(self, answer: bool) -> None:
        self._timer.stop()
        self.dismiss(answer)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.action_answer(event.button.id == "restart")
