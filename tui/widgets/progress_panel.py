"""Epoch and step progress bars."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widgets import Label, ProgressBar

from grpo_tui.tui.state import RunState


class ProgressPanel(Vertical):
    def compose(self) -> ComposeResult:
        for name in ("epoch", "step"):
            with Horizontal(classes="progress-row"):
                yield Label(name, id=f"{name}-label", classes="progress-label")
                yield ProgressBar(id=f"{name}-bar", show_eta=False)

    def show(self, state: RunState) -> None:
        done_epochs = state.epoch + (state.step_in_epoch / state.steps_per_epoch if state.steps_per_epoch else 0)
        if state.status == "done":
            done_epochs = state.total_epochs
        rows = (
            ("epoch", f"epoch {state.epoch + 1}/{state.total_epochs}", state.total_epochs, max(done_epochs, 0)),
            ("step", f"step {state.step}/{state.total_steps or '?'}", state.total_steps or None, state.step),
        )
        for name, label, total, progress in rows:
            self.query_one(f"#{name}-label", Label).update(label)
            self.query_one(f"#{name}-bar", ProgressBar).update(total=total, progress=progress)
