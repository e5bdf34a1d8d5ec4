"""Reward and loss curves of two (or more) runs overlaid, one plotext chart each."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Vertical
from textual_plotext import PlotextPlot

from grpo_tui.tui.inert_text import clean

Curve = list[tuple[int, float | None, float | None]]  # (step, reward, loss) as from queries.curve
COLORS = ("cyan", "orange", "green", "magenta")


def _points(curve: Curve, column: int) -> tuple[list[int], list[float]]:
    pairs = [(row[0], value) for row in curve if (value := row[column]) is not None]
    return [step for step, _ in pairs], [float(value) for _, value in pairs]


class DatabaseCompareChart(Vertical):
    """``show([(label, curve), ...])`` draws every curve on both charts."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.series: list[tuple[str, Curve]] = []

    def compose(self) -> ComposeResult:
        yield PlotextPlot(id="db-compare-reward")
        yield PlotextPlot(id="db-compare-loss")

    def show(self, series: list[tuple[str, Curve]]) -> None:
        self.series = series
        for plot_id, column, title in (("#db-compare-reward", 1, "reward"), ("#db-compare-loss", 2, "loss")):
            widget = self.query_one(plot_id, PlotextPlot)
            plt = widget.plt
            plt.clear_data()
            plt.clear_figure()
            plt.title(f"{title} per step")
            for (label, curve), color in zip(series, COLORS):
                xs, ys = _points(curve, column)
                if xs:
                    # plotext's output is parsed as ANSI: a run name must not carry escapes into it.
                    plt.plot(xs, ys, label=clean(label, single_line=True)[:40], color=color, marker="braille")
            plt.xlabel("step")
            widget.refresh()
