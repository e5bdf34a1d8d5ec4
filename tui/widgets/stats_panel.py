"""Throughput, time split and memory of the latest step, plus run totals.

Each fact is a cell ("label value · value") that is never split; cells are packed greedily into
as many lines as the width needs, so nothing wraps mid-pair and no label runs into a value at any
width. The panel's height follows the number of lines.
"""

from __future__ import annotations

from rich.console import Group
from rich.text import Text
from textual.widget import Widget

from grpo_tui.protocol import messages as m
from grpo_tui.tui.format import number, megabytes, whole
from grpo_tui.tui.state import RunState
from grpo_tui.tui.glyph_text import tidy

GAP = "   "


def cell(label: str, *parts: tuple[str, str]) -> Text:
    """``label`` dim, then ``(name, value)`` pairs: ``tok/s gen 2,000 · train 3,500``."""
    text = Text(end="").append(label, "dim")
    for i, (name, value) in enumerate(parts):
        text.append(" · " if i else " ", "dim")
        if name:
            text.append(name + " ", "dim")
        text.append(value)
    return text


def pack(cells: list[Text], width: int) -> list[Text]:
    """Greedy lines of cells separated by ``GAP``; a cell wider than the line gets a line of its own."""
    lines: list[Text] = []
    line = Text(no_wrap=True, overflow="ellipsis")
    for c in cells:
        if line.cell_len and line.cell_len + len(GAP) + c.cell_len > width:
            lines.append(line)
            line = Text(no_wrap=True, overflow="ellipsis")
        if line.cell_len:
            line.append(GAP)
        line.append_text(c)
    if line.cell_len:
        lines.append(line)
    return [tidy(x) for x in lines]


class StatsPanel(Widget):
    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.cells: list[Text] = [cell("tokens", ("", "0")), Text("waiting for the first step…", "dim")]
        self._plain = ""

    def show(self, state: RunState) -> None:
        s = state.last_step
        cells = [cell("tokens", ("", f"{state.total_tokens:,}"))]
        if s is None:
            cells.append(Text("waiting for the first step…", "dim"))
        else:
            cells += [
                cell("tok/s", ("gen", number(s.generation_tokens_per_s)),
                     ("train", number(s.training_tokens_per_s))),
                cell("ms", ("gen", whole(s.generation_ms)), ("score", whole(s.scoring_ms)),
                     ("train", whole(s.training_ms))),
                cell("memory", ("peak", megabytes(s.peak_memory_mb)), ("active", megabytes(s.active_memory_mb))),
                cell("run reward", ("best", number(state.totals.best_reward)), ("mean", number(state.totals.mean_reward))),
                cell("run loss", ("best", number(state.totals.best_loss)), ("mean", number(state.totals.mean_loss))),
                cell("lr", ("", number(s.learning_rate))),
                cell("grad norm", ("", number(s.grad_norm))),
            ]
            logged = sorted((k, v) for k, v in s.extra_metrics.items() if m.logged_by_rewards(k))
            if logged:  # what reward functions logged with log_metric (the worker's own figures: the Charts tab)
                cells.append(cell("reward metrics", *((k, number(v)) for k, v in logged)))
            if not s.gradients_applied:
                cells.append(Text(f"update skipped: {s.skipped_reason or 'non-finite loss'}", "bold red"))
        plain = "\n".join(c.plain for c in cells)
        if plain != self._plain:  # the same figures again (a header tick): nothing to redraw
            self.cells, self._plain = cells, plain
            self._fit()
            self.refresh()

    def on_resize(self) -> None:
        self._fit()

    def _fit(self) -> None:
        """Grow or shrink to the lines the cells need at this width (a layout only when that changes)."""
        lines = len(pack(self.cells, max(self.content_size.width, 20)))
        height = lines + self.styles.gutter.height
        if self.styles.height is None or self.styles.height.value != height:
            self.styles.height = height

    def render(self) -> Group:
        return Group(*pack(self.cells, max(self.content_size.width, 20)))

    def plain(self) -> str:
        return "\n".join(t.plain for t in pack(self.cells, max(self.content_size.width, 20)))
