"""[async]'s timeline (docs/async.md, "Reading the charts"): per step (or run of steps) how busy the
generator and the learner were, one band each, brighter = busier. A learner band that is dark while
the generator's is bright: the learner waits for rollouts (generation is the bottleneck); the other
way round, the generator waits at its staleness bound (learning is)."""

from __future__ import annotations

from rich.console import Group
from rich.style import Style
from rich.text import Text

from grpo_tui.tui.glyph_text import tidy
from grpo_tui.tui.plot import AXIS_WIDTH, ChartSettings, column_spans
from grpo_tui.tui.series import SeriesBook
from grpo_tui.tui.widgets.chart_panel import CachedChart

TITLE = "generator vs learner, busy share per step"
# top to bottom: (column, label, base colour)
BANDS = (("extra_metrics/async/generator_busy", "gen", (70, 150, 230)),
         ("extra_metrics/async/learner_busy", "learn", (240, 150, 50)))


def shade(base: tuple[int, int, int], busy: float) -> str:
    """The band's colour at ``busy`` (0: near black, 1: the full colour)."""
    f = 0.12 + 0.88 * max(0.0, min(1.0, busy))
    return "rgb({},{},{})".format(*(int(c * f) for c in base))


def columns(values: list[float], width: int) -> list[float]:
    """``values`` (one per step) as ``width`` columns, each the mean of the steps mapped to it."""
    return [sum(values[i] for i in span) / len(span) for span in column_spans(len(values), width)]


class BusyTimelineStrip(CachedChart):
    DEFAULT_CSS = """
    BusyTimelineStrip {
        height: 8;
    }
    """

    def __init__(self, book: SeriesBook, settings: ChartSettings, **kwargs: object) -> None:
        super().__init__(**kwargs)
        self.book, self.settings = book, settings
        self.border_title = TITLE

    def shown(self) -> bool:
        """Only an [async] run has these columns."""
        return BANDS[0][0] in self.book.keys()

    def _rows(self) -> tuple[list[int], list[list[float]]]:
        steps = list(self.book.steps)
        cols = [self.book.column(key) if key in self.book.keys() else [None] * len(steps) for key, _, _ in BANDS]
        keep = [i for i in range(len(steps)) if cols[0][i] is not None]
        if self.settings.window is not None:
            keep = keep[-self.settings.window:]
        return [steps[i] for i in keep], [[(c[i] or 0.0) for i in keep] for c in cols]

    def _subtitle(self) -> str:
        steps, bands = self._rows()
        if not steps:
            return ""
        return f"step {steps[-1]}: " + " · ".join(f"{label} {b[-1]:.0%}" for (_, label, _), b in zip(BANDS, bands))

    def _cache_key(self) -> tuple[object, ...]:
        return (self.book.version, self.settings.window, self.content_size.width, self.content_size.height)

    def _draw(self) -> Group:
        width, height = self.content_size.width, self.content_size.height
        steps, bands = self._rows()
        plot_w = width - AXIS_WIDTH
        if plot_w < 4 or height < 4 or not steps:
            lines = [Text(" " * width) for _ in range(max(height, 0))]
            if lines:
                lines[len(lines) // 2] = Text("no asynchronous steps yet".center(width), "dim")
            return Group(*lines)
        rows_per_band = max(1, (height - 2) // len(BANDS))
        lines = []
        for (_, label, base), values in zip(BANDS, bands):
            cells = columns(values, plot_w)
            for r in range(rows_per_band):
                line = tidy(Text().append((label if r == 0 else "").rjust(AXIS_WIDTH - 1) + "│", "dim"))
                for busy in cells:
                    line.append(" ", Style(bgcolor=shade(base, busy)))
                lines.append(line)
        first, last = str(steps[0]), str(steps[-1])
        lines.append(tidy(Text().append((" " * AXIS_WIDTH + first + last.rjust(plot_w - len(first)))[:width], "dim")))
        legend = Text(" " * AXIS_WIDTH).append("brighter = busier; dark = waiting for the other side", "dim")
        lines.append(tidy(legend))
        return Group(*lines[:height])
