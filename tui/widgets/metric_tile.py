"""One metric: its latest value and a sparkline of its history."""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Sparkline, Static

from grpo_tui.tui.format import format_number

SPARK_POINTS = 60  # the sparkline shows the most recent steps only


class MetricTile(Vertical):
    def __init__(self, key: str, title: str) -> None:
        super().__init__(id=f"tile-{key}", classes="tile")
        self.key, self.title = key, title

    def compose(self) -> ComposeResult:
        yield Static(self._label(None, ""), classes="tile-value")
        yield Sparkline([], classes="tile-spark")

    def _label(self, value: float | None, note: str) -> Text:
        text = Text(no_wrap=True, overflow="ellipsis")
        text.append(f"{self.title} ", "dim")
        text.append(format_number(value), "bold")
        if note:
            text.append(f" {note}", "bold yellow")
        return text

    def show(self, values: Sequence[float | None], note: str = "") -> None:
        recent = [v for v in list(values)[-SPARK_POINTS:] if v is not None]
        latest = next((v for v in reversed(values) if v is not None), None) if values else None
        self.query_one(".tile-value", Static).update(self._label(latest, note))
        self.query_one(Sparkline).data = recent  # empty (e.g. kl with beta = 0) draws nothing
