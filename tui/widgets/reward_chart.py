"""Reward (left axis) and loss (right axis) over steps, EMA-smoothed by a user-set factor; while
other runs are compared (``C``, docs/steering.md), the reward of each run in its colour instead.

Drawn with the Charts tab's braille renderer (tui/plot.py): plotext took ~100 ms a redraw on
two cores and stalled key presses behind it; this takes a few milliseconds, and only when the
data, the smoothing or the size changed: in the dashboard's once-a-second flush that brings new data
(a chart off screen draws when it is shown again). The rows go to the screen through the line API
(``text_strips``): the chart redraws every second while a run streams, and Rich's layout of a
renderable cost more than drawing the chart.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.style import Style
from rich.text import Text
from textual.strip import Strip
from textual.widget import Widget

from grpo_tui.tui.compared_runs import THIS_RUN_STYLE, ComparedRuns
from grpo_tui.tui.plot import LINE_COLORS, ChartSettings, Series, line_chart
from grpo_tui.tui.state import ema
from grpo_tui.tui.glyph_text import tidy
from grpo_tui.tui.widgets.text_strips import text_strips

class RewardChart(Widget):
    DEFAULT_CSS = """
    RewardChart {
        border: round $primary-darken-2;
        border-title-color: $text;
    }
    """

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.settings = ChartSettings()  # the dashboard screen hands the one it shares with the Charts tab
        self.compared = ComparedRuns()  # the dashboard screen hands its own (attributes down)
        self._data: tuple[list[int], list[float | None], list[float | None]] = ([], [], [])
        self._evals: list[Series] = []
        self._marks: list[tuple[int, str]] = []
        self._version = 0  # bumped by show(); the drawing keeps the version it shows
        self._key: tuple[object, ...] | None = None  # what the drawing shows (``_cache_key()``)
        self._base: Style | None = None  # the colours it was drawn on
        self._drawing: list[Strip] = []
        self._title()

    @property
    def smoothing(self) -> float:
        return self.settings.smoothing

    def _shown_evals(self) -> list[Series]:
        return [curve for curve in self._evals if any(v is not None for v in curve.values)]

    def _title(self) -> None:
        if self.compared.runs:
            parts: list[str | tuple[str, str]] = ["reward per run · ", ("■", THIS_RUN_STYLE), " this run"]
            for run in self.compared.runs:
                parts += [" · ", ("■", run.style), " ", run.name]
            self.border_title = tidy(Text.assemble(*parts, f" · EMA {self.smoothing:g} · loss: Charts tab"))
            return
        # Lines take LINE_COLORS in order: reward, then the eval curves when there are any, then loss.
        evals = self._shown_evals()
        names = [("reward", " (left) · ")]
        if evals:
            names = [("reward", " · "), *((curve.label, " · ") for curve in evals[:-1]), (evals[-1].label, " (left) · ")]
        names.append(("loss", " (right) · "))
        parts = []
        for i, (name, after) in enumerate(names):
            parts += [(name, LINE_COLORS[i]), after]
        self.border_title = tidy(Text.assemble(*parts, f"EMA {self.smoothing:g} · [ ] to change"))

    def _cache_key(self) -> tuple[object, ...]:
        return (self._version, self.compared.version, self.settings.version, self.content_size.width,
                self.content_size.height)

    @property
    def up_to_date(self) -> bool:
        """False while new data waits for the next redraw (a chart off screen has nothing to wait for)."""
        return self._key == self._cache_key() or not self.is_on_screen

    def settings_changed(self) -> None:
        """The shared settings moved (the smoothing keys)."""
        self._title()
        self.refresh()

    def show(
        self, steps: Sequence[int], reward: Sequence[float | None], loss: Sequence[float | None],
        evals: list[Series] | None = None,
        marks: Sequence[tuple[int, str]] = (),
    ) -> None:
        """Reward and loss per step; ``evals`` adds the held-out curves (one point per evaluation);
        ``marks`` (step, label) ticks the x axis at each live change."""
        self._data = (list(steps), list(reward), list(loss))
        self._marks = list(marks)
        if evals is not None and evals != self._evals:
            self._evals = evals
            self._title()
        self._version += 1
        self.refresh()  # drawn with the rest of this flush; off screen (a maximized tab) it draws when shown

    def compared_changed(self) -> None:
        """The compared runs, or their steps, changed."""
        self._title()
        self.refresh()

    def _rows(self) -> list[Text]:
        steps, reward, loss = self._data
        size = self.content_size
        if self.compared.runs:
            return line_chart(
                [Series("this run", steps, ema(reward, self.smoothing), THIS_RUN_STYLE),
                 *(Series(run.name, list(run.book.steps), ema(run.book.column("reward"), self.smoothing), run.style)
                   for run in self.compared.runs)],
                size.width, size.height, marks=self._marks)
        return line_chart(
            [Series("reward", steps, ema(reward, self.smoothing)),
             *self._shown_evals()],  # one point per evaluation, not smoothed
            size.width, size.height,
            right=[Series("loss", steps, ema(loss, self.smoothing))], marks=self._marks,
        )

    def render_line(self, y: int) -> Strip:
        key, base = self._cache_key(), self.visual_style.rich_style
        if key != self._key or base != self._base:
            self._key, self._base, self._drawing = key, base, text_strips(self._rows(), self.app.console, base)
        return self._drawing[y] if y < len(self._drawing) else Strip.blank(self.size.width, base)

    def plain(self) -> str:
        """The drawing as text (tests)."""
        return "\n".join(strip.text for strip in self._drawing)
