"""One metric: its latest value and a sparkline of its history, the metric's name in the border.

Name and value never share a line, so a narrow tile can't cut the value or run the two together.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Sparkline, Static

from grpo_tui.tui.format import fit_number, number
from grpo_tui.tui.glyph_text import tidy

SPARK_POINTS = 60  # the sparkline shows the most recent steps only


def tile_value(value: str, note: str) -> Text:
    text = Text(no_wrap=True, overflow="ellipsis", end="").append(value, "bold")
    if note:
        text.append(" ").append(note, "bold yellow")
    return tidy(text)


class MetricTile(Vertical):
    def __init__(self, key: str, title: str) -> None:
        super().__init__(id=f"tile-{key}", classes="tile")
        self.key, self.title = key, title
        self.border_title = title
        self._shown: tuple[str, str] = (number(None), "")
        self._spark: list[float] = []
        self._latest: tuple[float | None, str] = (None, "")

    def compose(self) -> ComposeResult:
        yield Static(tile_value(*self._shown), classes="tile-value")
        spark = Sparkline([], classes="tile-spark")
        spark.visible = False  # until there is a value to draw
        yield spark

    def show(self, values: Sequence[float | None], note: str = "") -> None:
        latest = next((v for v in reversed(values) if v is not None), None) if values else None
        self._latest = (latest, note)
        self._show_value()
        recent = [v for v in list(values)[-SPARK_POINTS:] if v is not None]
        if recent != self._spark:
            self._spark = recent
            spark = self.query_one(Sparkline)
            spark.data = recent
            # empty (e.g. kl with beta = 0): Textual would draw a flat line of its lowest bar, which reads
            # as a series stuck at its minimum; the blank line says there is none
            spark.visible = bool(recent)

    def on_resize(self) -> None:
        self._show_value()

    def _show_value(self) -> None:
        """The latest value in the tile's width: fewer digits, never a number cut short."""
        latest, note = self._latest
        width = self.content_size.width - (len(note) + 1 if note else 0)
        shown = (fit_number(latest, width), note)
        if shown != self._shown:
            self._shown = shown
            self.query_one(".tile-value", Static).update(tile_value(*shown), layout=False)
