"""Throughput and memory of the latest step, plus run totals."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from grpo_tui.tui.state import RunState, format_number


def _ms(value: float | None) -> str:
    return "—" if value is None else f"{value:,.0f}"


def _mb(value: float | None) -> str:
    if value is None:
        return "—"
    return f"{value / 1024:.2f} GB" if value >= 1024 else f"{value:.1f} MB"


class StatsPanel(Static):
    def show(self, state: RunState) -> None:
        s = state.last_step
        text = Text(no_wrap=True, overflow="ellipsis")
        text.append("tokens ", "dim").append(f"{state.total_tokens:,}")
        if s is None:
            text.append("   waiting for the first step…", "dim")
            self.update(text)
            return
        text.append("   tokens/s ", "dim").append(
            f"gen {format_number(s.generation_tokens_per_s)} · train {format_number(s.training_tokens_per_s)}"
        )
        text.append("\nms/step ", "dim").append(
            f"generation {_ms(s.generation_ms)} · scoring {_ms(s.scoring_ms)} · training {_ms(s.training_ms)}"
        )
        text.append("\nmemory ", "dim").append(
            f"peak {_mb(s.peak_memory_mb)} · active {_mb(s.active_memory_mb)}"
        )
        text.append("   lr ", "dim").append(format_number(s.learning_rate))
        text.append("   grad norm ", "dim").append(format_number(s.grad_norm))
        if not s.gradients_applied:
            text.append(f"\nupdate skipped: {s.skipped_reason or 'non-finite loss'}", "bold red")
        self.update(text)
