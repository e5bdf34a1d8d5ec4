"""How the worker ended, when it did not finish: a crash counts down to a restart from the latest
checkpoint (``CrashScreen``); a fixable mistake is never restarted, it says what to fix and offers a
retry (``MistakeScreen``). Both say why (the worker's error frame, else its last stderr lines) and
where the full log is (``protocol/outcome.py``)."""

from __future__ import annotations

import math
from collections.abc import Callable

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Static

from grpo_tui.protocol.outcome import describe
from grpo_tui.tui.inert_text import clean


def _reason(text: Text, reason: str, log_path: str) -> None:
    for line in reason.splitlines()[-4:]:
        text.append(clean(line, single_line=True)[:300] + "\n", "red")
    if log_path:
        text.append("Full log: ", "dim")
        text.append(clean(log_path, single_line=True) + "\n")


class CrashScreen(ModalScreen[bool]):
    """Dismissed with True to restart (now or when the countdown ends), False to cancel."""

    BINDINGS = [Binding("enter,R", "answer(True)", "restart now"), Binding("escape,c", "answer(False)", "cancel")]

    def __init__(
        self, code: int, attempt: int, max_restarts: int, delay_s: float, clock: Callable[[], float],
        last_error: str = "", log_path: str = "",
    ) -> None:
        super().__init__()
        self.code, self.attempt, self.max_restarts = code, attempt, max_restarts
        self.clock, self.deadline, self.last_error, self.log_path = clock, clock() + delay_s, last_error, log_path

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
        how = describe(self.code) if self.code < 0 or self.code > 128 else f"exited with code {self.code}"
        text.append(f"✗ The worker crashed ({how}).\n", "bold red")
        _reason(text, self.last_error or "It reported nothing before it ended.", self.log_path)
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


class MistakeScreen(ModalScreen[bool]):
    """A fixable mistake: the sentence, no countdown. True: retry (the worker reads the config and
    its files anew); False: close, the dashboard stays with the error in its header."""

    BINDINGS = [Binding("enter,R", "answer(True)", "retry"), Binding("escape,c", "answer(False)", "close")]

    def __init__(self, sentence: str, log_path: str = "") -> None:
        super().__init__()
        self.sentence, self.log_path = sentence, log_path

    def compose(self) -> ComposeResult:
        text = Text()
        text.append("✗ The run stopped on a mistake you can fix:\n\n", "bold red")
        text.append(clean(self.sentence, single_line=True)[:1000] + "\n\n", "bold")
        text.append("Fix it, then retry: the worker starts again and reads the config and its files anew.", "dim")
        with Vertical(id="mistake-box", classes="dialog"):
            yield Static(text, id="mistake-text")
            with Horizontal(classes="buttons"):
                yield Button("Retry (enter)", id="retry", variant="primary")
                yield Button("Close (esc)", id="close")

    def action_answer(self, answer: bool) -> None:
        self.dismiss(answer)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.action_answer(event.button.id == "retry")
