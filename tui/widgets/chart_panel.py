"""One metric (or a few related ones) over steps: a small braille line chart in a titled box.

The panel draws from a ``SeriesBook`` it is handed and the ``ChartSettings`` it shares with the
rest of the Charts tab; it keeps its last drawing and only draws again when the book, the
settings or its size changed, so a refresh of an unchanged panel costs nothing. Runs compared with
this one (``C``, docs/steering.md) draw the same columns over it, each in its run's colour, from
the step where this run's window starts.
"""

from __future__ import annotations

import time

from rich.console import Group
from rich.text import Text
from textual.binding import Binding
from textual.message import Message
from textual.widget import Widget

from grpo_tui.tui.compared_runs import THIS_RUN_STYLE, ComparedRuns
from grpo_tui.tui.format import number
from grpo_tui.tui.plot import LINE_COLORS, ChartSettings, Series, line_chart
from grpo_tui.tui.series import PanelSpec, SeriesBook
from grpo_tui.tui.state import ema
from grpo_tui.tui.glyph_text import tidy


class Move(Message):
    """Arrow keys on a focused chart: the Charts view moves focus (the scroll container would scroll)."""

    def __init__(self, dx: int, dy: int) -> None:
        super().__init__()
        self.dx, self.dy = dx, dy


MOVE_BINDINGS: list[Binding | tuple[str, str] | tuple[str, str, str]] = [
    Binding(key, f"move({dx}, {dy})", key, show=False)
    for key, dx, dy in (("up", 0, -1), ("down", 0, 1), ("left", -1, 0), ("right", 1, 0))
]


def windowed(book: SeriesBook, key: str, window: int | None, smoothing: float) -> tuple[list[int], list[float | None]]:
    steps, values = list(book.steps), book.column(key)
    if window is not None and len(steps) > window:
        # smooth a little before the window so its first points are not the EMA's cold start
        start = max(0, len(steps) - window - 4 * window)
        steps, values = steps[start:], values[start:]
        values = ema(values, smoothing)[-window:] if smoothing else values[-window:]
        return steps[-window:], values
    return steps, ema(values, smoothing) if smoothing else values


class CachedChart(Widget, can_focus=True):
    """A chart that keeps its drawing keyed on ``_cache_key()`` and redraws only when asked to by
    ``redraw()`` (the Charts view's tick) or when its size changes. Subclasses draw and subtitle."""

    DEFAULT_CSS = """
    CachedChart {
        border: round $primary-darken-2;
        border-title-color: $text;
        border-subtitle-color: $text-muted;
    }
    CachedChart:focus {
        border: round $accent;
    }
    CachedChart.-maximized {
        height: 1fr;
    }
    """
    BINDINGS = MOVE_BINDINGS

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self._key: tuple[object, ...] | None = None  # what the cached drawing shows
        self._polled: tuple[object, ...] | None = None  # what the last redraw() saw
        self._drawing: Group = Group()
        self.drawn_at = 0.0  # monotonic time of the last redraw(): the oldest go first

    def action_move(self, dx: int, dy: int) -> None:
        self.post_message(Move(dx, dy))

    def on_mount(self) -> None:
        self.redraw()

    @property
    def stale(self) -> bool:
        """True when the data, the settings or the size moved since the last redraw()."""
        return self._cache_key() != self._polled

    def redraw(self) -> None:
        self._polled, self.drawn_at = self._cache_key(), time.monotonic()
        subtitle = self._subtitle()
        if subtitle != self.border_subtitle:
            self.border_subtitle = subtitle
        self.refresh()

    def render(self) -> Group:
        key = self._cache_key()
        if key != self._key:
            self._key, self._drawing = key, self._draw()
        return self._drawing

    def plain(self) -> str:
        """The drawing as text (tests and debugging)."""
        return "\n".join(t.plain for t in self._drawing.renderables if isinstance(t, Text))

    def _cache_key(self) -> tuple[object, ...]:
        raise NotImplementedError

    def _subtitle(self) -> str:
        raise NotImplementedError

    def _draw(self) -> Group:
        raise NotImplementedError


class ChartPanel(CachedChart):
    DEFAULT_CSS = """
    ChartPanel {
        height: 9;
    }
    """

    def __init__(self, spec: PanelSpec, book: SeriesBook, settings: ChartSettings,
                 compared: ComparedRuns | None = None, **kwargs: object) -> None:
        super().__init__(**kwargs)
        self.spec, self.book, self.settings = spec, book, settings
        self.compared = compared if compared is not None else ComparedRuns()
        self._titled: int | None = None  # the compared runs' version the title shows
        self._title()

    def _title(self) -> None:
        spec, runs = self.spec, self.compared.runs
        title = Text(spec.title)
        if runs:  # a legend of runs: this run's lines in its colour, each compared run's in its own
            title.append("  ").append("■", THIS_RUN_STYLE).append(" this")
            for run in runs:
                title.append(" ").append("■", run.style).append(" " + run.name)
        elif len(spec.lines) > 1:  # a legend: each line's label in its colour
            for i, (_, label) in enumerate(spec.lines):
                title.append("  " if i == 0 else " ").append(label, LINE_COLORS[i % len(LINE_COLORS)])
        self.border_title = tidy(title)  # a Text: model-chosen reward names are never markup
        self._titled = self.compared.version

    def redraw(self) -> None:
        if self._titled != self.compared.version:
            self._title()
        super().redraw()

    def _subtitle(self) -> str:
        """The latest raw values, in the lines' order (the chart itself may be smoothed)."""
        scale = 100.0 if self.spec.percent else 1.0
        latest = [self.book.latest(column) for column, _ in self.spec.lines]
        return " · ".join(
            "—" if v is None else number(v * scale) + (" %" if self.spec.percent else "") for v in latest
        )

    def _cache_key(self) -> tuple[object, ...]:
        return (self.book.version, self.settings.version, self.compared.version, self.content_size.width,
                self.content_size.height)

    def _draw(self) -> Group:
        settings, spec, runs = self.settings, self.spec, self.compared.runs
        series = []
        for column, label in spec.lines:
            steps, values = windowed(self.book, column, settings.window, settings.smoothing)
            series.append(Series(label, steps, values, THIS_RUN_STYLE if runs else None))
        first = min((s.steps[0] for s in series if s.steps), default=None) if settings.window is not None else None
        for run in runs:
            for column, label in spec.lines:
                steps, values = windowed(run.book, column, None, settings.smoothing)
                keep = [i for i, step in enumerate(steps) if first is None or step >= first]
                series.append(Series(run.name, [steps[i] for i in keep], [values[i] for i in keep], run.style))
        size = self.content_size
        return Group(*line_chart(series, size.width, size.height, percent=spec.percent, marks=self.book.marks))
