"""Epoch and step progress bars.

The epoch bar is the share of the current epoch's batches done. When ``max_steps`` stops the run
inside an epoch the bar would never fill, so the note beside it says where the run will stop.
"""

from __future__ import annotations

from rich.style import Style
from rich.text import Text
from textual import events
from textual.app import ComposeResult, RenderResult
from textual.containers import Horizontal, Vertical
from textual.widgets import ProgressBar, Static
from textual.widgets._progress_bar import Bar, PercentageStatus

from grpo_tui.tui.state import RunState
from grpo_tui.tui.glyph_text import tidy


def epoch_note(state: RunState) -> str:
    """Where the current epoch stands, and where the run ends inside it if it does."""
    per_epoch, done = state.steps_per_epoch, state.step_in_epoch
    if not per_epoch:
        return ""
    note = f"batch {done}/{per_epoch}"
    if state.total_steps:
        last_epoch = (state.total_steps - 1) // per_epoch
        stop_at = state.total_steps - last_epoch * per_epoch
        if state.epoch == last_epoch and stop_at < per_epoch:
            ends = "ended" if state.status == "done" else "ends"
            note += f" · run {ends} at batch {stop_at} (max_steps)"
    return note


class StillBar(Bar):
    """Textual's bar without the animation of an unknown total: that repaints the bar 15 times a
    second (before the worker's init says the totals, or all run long for an epoch of unknown
    length), each a screen update of its own. An unknown total shows as an empty bar."""

    def watch_percentage(self, percentage: float | None) -> None:
        self.auto_refresh = None

    def render_indeterminate(self) -> RenderResult:
        style = self.get_component_rich_style("bar--bar")
        return self.bar_renderable(highlight_range=(0, 0), highlight_style=Style.from_color(style.color),
                                   background_style=Style.from_color(style.bgcolor))


class QuietBar(ProgressBar):
    """Textual's progress bar without its once-a-second timer and without animation. The timer
    re-estimates an ETA that these bars do not show, and each tick repainted its bar in a screen
    update of its own, between the dashboard's once-a-second redraws: a viewer composed the screen
    several times a second."""

    def _on_mount(self, event: events.Mount) -> None:
        super()._on_mount(event)
        event.prevent_default()  # no ProgressBar.on_mount, which starts the timer
        self.update()

    def compose(self) -> ComposeResult:  # ProgressBar's, with the still bar
        yield StillBar(id="bar", clock=self._clock, bar_renderable=self.BAR_RENDERABLE).data_bind(
            ProgressBar.percentage).data_bind(ProgressBar.gradient)
        if self.show_percentage:
            yield PercentageStatus(id="percentage").data_bind(ProgressBar.percentage)


class ProgressPanel(Vertical):
    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self._shown: dict[str, Text] = {}

    def compose(self) -> ComposeResult:
        for name in ("epoch", "step"):
            with Horizontal(classes="progress-row"):
                yield Static(name, id=f"{name}-label", classes="progress-label")
                yield QuietBar(id=f"{name}-bar", show_eta=False)
                yield Static(id=f"{name}-note", classes="progress-note")

    def show(self, state: RunState) -> None:
        per_epoch = state.steps_per_epoch or None
        rows = (
            ("epoch", f"epoch {state.epoch + 1}/{state.total_epochs}", per_epoch, state.step_in_epoch,
             epoch_note(state)),
            ("step", f"step {state.step}/{state.total_steps or '?'}", state.total_steps or None, state.step, ""),
        )
        for name, label, total, progress, note in rows:
            self._text(f"#{name}-label", Text(label, no_wrap=True))
            self.query_one(f"#{name}-bar", QuietBar).update(total=total, progress=progress)
            self._text(f"#{name}-note", tidy(Text(note, "dim", no_wrap=True, overflow="ellipsis")))

    def _text(self, selector: str, text: Text) -> None:
        """Update an auto-width label; a re-layout only when its width changes (not on every step)."""
        widget = self.query_one(selector, Static)
        old = self._shown.get(selector)
        if old is None or old.plain != text.plain:
            self._shown[selector] = text
            widget.update(text, layout=old is None or len(old.plain) != len(text.plain))
