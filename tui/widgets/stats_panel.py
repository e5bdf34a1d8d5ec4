"""Throughput and memory of the latest step, plus run totals."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from grpo_tui.tui.format import format_number, megabytes, whole
from grpo_tui.tui.state import RunState


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
            f"generation {whole(s.generation_ms)} · scoring {whole(s.scoring_ms)} · training {whole(s.training_ms)}"
        )
        text.append("\nmemory ", "dim").append(
            f"peak {megabytes(s.peak_memory_mb)} · active {megabytes(s.active_memory_mb)}"
        )
        text.append("   lr ", "dim").append(format_number(s.learning_rate))
        text.append("   grad norm ", "dim").append(format_number(s.grad_norm))
        if s.extra_metrics:  # what reward functions logged with log_metric
            text.append("\nreward metrics ", "dim").append(
                " · ".join(f"{k} {format_number(v)}" for k, v in sorted(s.extra_metrics.items())))
        if not s.gradients_applied:
            text.append(f"\nupdate skipped: {s.skipped_reason or 'non-finite loss'}", "bold red")
        self.update(text)
