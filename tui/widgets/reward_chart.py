"""Reward (left axis) and loss (right axis) over steps, EMA-smoothed by a user-set factor."""

from __future__ import annotations

from collections.abc import Sequence

from textual_plotext import PlotextPlot

from grpo_tui.tui.state import ema

SMOOTHING_LEVELS = (0.0, 0.3, 0.6, 0.8, 0.9, 0.95, 0.99)
REDRAW_INTERVAL_S = 1.0  # plotext is the costliest widget to draw; new data is shown once a second


class RewardChart(PlotextPlot):
    def __init__(self, smoothing: float = 0.6, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.smoothing = smoothing
        self._data: tuple[list[int], list[float | None], list[float | None]] = ([], [], [])
        self._eval: tuple[str, list[int], list[float | None]] = ("eval", [], [])
        self._stale = False

    def on_mount(self) -> None:
        self._draw()
        self.set_interval(REDRAW_INTERVAL_S, self._draw_if_stale)

    @property
    def up_to_date(self) -> bool:
        """False while new data waits for the next redraw."""
        return not self._stale

    def _draw_if_stale(self) -> None:
        if self._stale:
            self._draw()

    def change_smoothing(self, direction: int) -> float:
        """Step to the next smoothing level up (+1) or down (-1); returns the new factor."""
        levels = SMOOTHING_LEVELS
        i = min(range(len(levels)), key=lambda k: abs(levels[k] - self.smoothing))
        self.smoothing = levels[max(0, min(len(levels) - 1, i + direction))]
        self._draw()
        return self.smoothing

    def show(
        self, steps: Sequence[int], reward: Sequence[float | None], loss: Sequence[float | None],
        evals: tuple[str, list[int], list[float | None]] | None = None,
    ) -> None:
        """Reward and loss per step; ``evals`` (label, steps, values) adds the held-out curve."""
        self._data = (list(steps), list(reward), list(loss))
        if evals is not None:
            self._eval = evals
        self._stale = True

    def _draw(self) -> None:
        self._stale = False
        plt = self.plt
        plt.clear_data()
        plt.title(f"reward & loss  (EMA {self.smoothing:g} · [ ] to change)")
        steps, reward, loss = self._data
        for values, label, color, side in ((reward, "reward", "green", "left"), (loss, "loss", "orange", "right")):
            smooth = ema(values, self.smoothing)
            points = [(s, v) for s, v in zip(steps, smooth) if v is not None]
            if points:
                xs, ys = zip(*points)
                plt.plot(list(xs), list(ys), label=label, color=color, yside=side, marker="braille")
        label, at, values = self._eval
        points = [(s, v) for s, v in zip(at, values) if v is not None]
        if points:  # few points, not smoothed: each is one evaluation
            xs, ys = zip(*points)
            plt.plot(list(xs), list(ys), label=label, color="cyan", yside="left", marker="dot")
        plt.xlabel("step")
        self.refresh()
