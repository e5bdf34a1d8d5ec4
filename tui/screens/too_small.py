"""Shown while the terminal is smaller than the smallest size the dashboard's layout fits
(``MIN_SIZE``): below it the header's status and the chart are cut away without a word. The run's
keys still work over it (``d`` detach, ``q`` quit, ``p`` pause: they are the app's); it goes as soon
as the terminal is large enough again."""

from __future__ import annotations

from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.geometry import Size
from textual.screen import Screen
from textual.widgets import Static

MIN_SIZE = Size(80, 24)  # the smallest layout tested and shown (screenshots/dashboard-80x24.svg)


def too_small(size: Size) -> bool:
    return size.width < MIN_SIZE.width or size.height < MIN_SIZE.height


class TooSmallScreen(Screen[None]):
    DEFAULT_CSS = """
    TooSmallScreen { align: center middle; background: $background; }
    TooSmallScreen #too-small-text { width: 100%; height: auto; text-align: center; }
    """

    def compose(self) -> ComposeResult:
        yield Static(id="too-small-text")

    def on_mount(self) -> None:
        self._say(self.app.size)

    def on_resize(self, event: events.Resize) -> None:
        if not too_small(event.size):
            if self.is_current:  # a second resize may come while it is being dismissed
                self.dismiss()
            return
        self._say(event.size)

    def _say(self, size: Size) -> None:
        text = Text(f"The terminal is {size.width}×{size.height}: the dashboard needs "
                    f"{MIN_SIZE.width}×{MIN_SIZE.height}.\n", "bold")
        text.append("Make the window larger; the run's keys still work (d detach, q quit).", "dim")
        self.query_one("#too-small-text", Static).update(text)
