"""The curriculum's prompt pool over time (docs/curriculum.md): one column per step (or run of
steps), its height split into the shares of prompts too hard, learning, solved and not seen yet,
stacked from the bottom. A run that learns moves its pool from red through yellow to green."""

from __future__ import annotations

from rich.console import Group
from rich.style import Style
from rich.text import Text

from grpo_tui.tui.plot import AXIS_WIDTH, ChartSettings, column_spans
from grpo_tui.tui.series import SeriesBook
from grpo_tui.tui.glyph_text import tidy
from grpo_tui.tui.widgets.chart_panel import CachedChart

TITLE = "prompt pool per step"
# bottom to top: (state, what the legend says, cell colour)
STATES = (("too_hard", "too hard", "rgb(200,60,60)"), ("learning", "learning", "rgb(230,190,40)"),
          ("solved", "solved", "rgb(60,170,90)"), ("unseen", "unseen", "rgb(70,70,80)"))
KEYS = tuple(f"extra_metrics/curriculum/{state}" for state, _, _ in STATES)


def stacked(counts: list[tuple[float, ...]], width: int, height: int) -> list[list[str | None]]:
    """A ``height`` x ``width`` grid of colours, row 0 the top: column c stacks the states' shares of
    the steps mapped to it (their mean), each state taking its share of the rows, rounded so the
    column is full."""
    grid: list[list[str | None]] = [[None] * width for _ in range(height)]
    n = len(counts)
    if n == 0 or width <= 0 or height <= 0:
        return grid
    for c, span in enumerate(column_spans(n, width)):
        means = [sum(counts[i][k] for i in span) / len(span) for k in range(len(STATES))]
        total = sum(means) or 1.0
        row = height
        edge = 0.0
        for (_, _, colour), share in zip(STATES, means):
            edge += share / total * height
            top = height - round(edge)
            for r in range(top, row):
                grid[r][c] = colour
            row = min(row, top)
    return grid


class PromptPoolStrip(CachedChart):
    DEFAULT_CSS = """
    PromptPoolStrip {
        height: 12;
    }
    """

    def __init__(self, book: SeriesBook, settings: ChartSettings, **kwargs: object) -> None:
        super().__init__(**kwargs)
        self.book, self.settings = book, settings
        self.border_title = TITLE

    def shown(self) -> bool:
        """Only a run with a curriculum has these columns."""
        return KEYS[1] in self.book.keys()

    def _rows(self) -> tuple[list[int], list[tuple[float, ...]]]:
        steps = list(self.book.steps)
        columns = [self.book.column(key) if key in self.book.keys() else [None] * len(steps) for key in KEYS]
        rows = [(step, tuple(c[i] or 0.0 for c in columns)) for i, step in enumerate(steps)
                if columns[1][i] is not None]
        if self.settings.window is not None:
            rows = rows[-self.settings.window:]
        return [s for s, _ in rows], [r for _, r in rows]

    def _subtitle(self) -> str:
        steps, counts = self._rows()
        if not steps:
            return ""
        last = counts[-1]
        return f"step {steps[-1]}: " + " · ".join(f"{v:.0f} {label}" for (_, label, _), v in zip(STATES, last))

    def _cache_key(self) -> tuple[object, ...]:
        return (self.book.version, self.settings.window, self.content_size.width, self.content_size.height)

    def _draw(self) -> Group:
        width, height = self.content_size.width, self.content_size.height
        steps, counts = self._rows()
        plot_w, plot_h = width - AXIS_WIDTH, height - 2
        if plot_w < 4 or plot_h < 1 or not steps:
            lines = [Text(" " * width) for _ in range(max(height, 0))]
            if lines:
                lines[len(lines) // 2] = Text("no curriculum steps yet".center(width), "dim")
            return Group(*lines)
        grid = stacked(counts, plot_w, plot_h)
        lines = []
        for r, cells in enumerate(grid):
            label = "100%" if r == 0 else "0%" if r == plot_h - 1 else ""
            line = tidy(Text().append(label.rjust(AXIS_WIDTH - 1) + "│", "dim"))
            for colour in cells:
                line.append(" ", Style(bgcolor=colour) if colour else "")
            lines.append(line)
        first, last = str(steps[0]), str(steps[-1])
        lines.append(tidy(Text().append((" " * AXIS_WIDTH + first + last.rjust(plot_w - len(first)))[:width], "dim")))
        legend = Text(" " * AXIS_WIDTH)
        for _, label, colour in STATES:
            legend.append("  ", Style(bgcolor=colour)).append(f" {label}  ", "dim")
        lines.append(tidy(legend))
        return Group(*lines[:height])
