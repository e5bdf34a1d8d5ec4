"""The reward distribution over time: one column per step (or run of steps), one row per reward bin.

A cell is brighter the more of the step's completions landed in its bin, so a spread that
narrows to one bright row is a collapse (every completion scores the same: no learning signal)
and one that piles into the top row is saturation (the task is solved or the reward hacked).
"""

from __future__ import annotations

from rich.console import Group
from rich.text import Text

from grpo_tui.tui.plot import AXIS_WIDTH, axis_label, heat_strip
from grpo_tui.tui.series import RewardSpread
from grpo_tui.tui.glyph_text import tidy
from grpo_tui.tui.plot import ChartSettings
from grpo_tui.tui.widgets.chart_panel import CachedChart

TITLE = "reward distribution per step"


class RewardHeatmap(CachedChart):
    DEFAULT_CSS = """
    RewardHeatmap {
        height: 12;
    }
    """
    def __init__(self, spread: RewardSpread, settings: ChartSettings, **kwargs: object) -> None:
        super().__init__(**kwargs)
        self.spread, self.settings = spread, settings
        self.border_title = TITLE

    def _subtitle(self) -> str:
        rows = self.spread.rows
        if not rows:
            return ""
        source = "all completions" if not self.spread.partial else "shown samples only: m → all for every completion"
        return f"step {rows[-1].step}: {len(rows[-1].rewards)} rewards · {source}"

    def _cache_key(self) -> tuple[object, ...]:
        # the smoothing does not apply to a distribution: only the window does
        return (self.spread.version, self.settings.window, self.content_size.width, self.content_size.height)

    def _draw(self) -> Group:
        width, height = self.content_size.width, self.content_size.height
        rows = list(self.spread.rows)
        if self.settings.window is not None:
            rows = rows[-self.settings.window:]
        plot_w, plot_h = width - AXIS_WIDTH, height - 1
        values = [v for r in rows for v in r.rewards]
        if plot_w < 4 or plot_h < 1 or not values:
            lines = [Text(" " * width) for _ in range(max(height, 0))]
            if lines:
                lines[len(lines) // 2] = Text("no rewards yet".center(width), "dim")
            return Group(*lines)
        lo, hi = min(values), max(values)
        if hi - lo < 1e-9:
            lo, hi = lo - 0.5, hi + 0.5
        grid = heat_strip([r.rewards for r in rows], plot_w, plot_h, lo, hi)
        lines = []
        for r, cells in enumerate(grid):
            label = axis_label(hi) if r == 0 else axis_label(lo) if r == plot_h - 1 else ""
            line = tidy(Text().append(label.ljust(AXIS_WIDTH - 1) + "│", "dim"))
            for style in cells:
                line.append(" ", style or "")
            lines.append(line)
        first, last = str(rows[0].step), str(rows[-1].step)
        lines.append(tidy(Text().append((" " * AXIS_WIDTH + first + last.rjust(plot_w - len(first)))[:width], "dim")))
        return Group(*lines)
