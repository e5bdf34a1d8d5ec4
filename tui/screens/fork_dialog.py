"""``f`` on a checkpoint of the Config tab: fork the run from it (docs/steering.md, "Fork a run"). Asks
for the changes (``KEY=VALUE`` items, as ``--set`` reads them, any key but the model) and the fork's
folder; ``enter`` makes the fork and starts it in the background, ``esc`` cancels. Dismissed with
``(items, folder)`` or None."""

from __future__ import annotations

import shlex

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Static

from grpo_tui.tui.inert_text import inert


class ForkScreen(ModalScreen[tuple[list[str], str] | None]):
    BINDINGS = [Binding("escape", "cancel", "cancel")]
    DEFAULT_CSS = """
    ForkScreen { align: center middle; }
    ForkScreen #fork-box { width: 96; max-width: 100%; height: auto; border: thick $accent; padding: 0 1;
                           background: $surface; }
    ForkScreen Input { margin: 0 0 1 0; }
    """

    def __init__(self, step: int, folder: str) -> None:
        super().__init__()
        self.step, self.folder = step, folder

    def compose(self) -> ComposeResult:
        with Vertical(id="fork-box"):
            yield Static(Text.assemble((f"Fork this run at step {self.step}", "bold"),
                                       (f"  a new run from this checkpoint; its first step is {self.step + 1}", "dim")))
            yield Static(Text("changes (KEY=VALUE, space between them; any key but the model):", "dim"))
            yield Input(placeholder="generation.temperature=0.7 training.learning_rate=5e-6", id="fork-sets")
            yield Static(Text("the fork's folder:", "dim"))
            yield Input(self.folder, id="fork-folder")
            yield Static(inert("enter forks and starts it in the background (compared here, C) · esc cancels",
                               single_line=True))

    def on_mount(self) -> None:
        self.query_one("#fork-sets", Input).focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        try:
            items = shlex.split(self.query_one("#fork-sets", Input).value)
        except ValueError as exc:  # an unclosed quote
            self.notify(f"changes: {exc}", severity="error", markup=False)
            return
        self.dismiss((items, self.query_one("#fork-folder", Input).value.strip()))

    def action_cancel(self) -> None:
        self.dismiss(None)
