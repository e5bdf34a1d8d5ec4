"""How store rows look in the Database tab: column headers, step cells, tool-call summaries, sorting.

Numbers, times and durations come from ``tui/format.py``.
"""

from __future__ import annotations

import json
from typing import Any, Sequence

from grpo_tui.tui.format import MISSING, clock, number

# Step columns shown under a shorter header.
STEP_HEADERS = {
    "frac_reward_zero_std": "zero_std", "completion_mean_length": "mean_len",
    "completion_clipped_ratio": "clipped", "generation_tokens_per_s": "gen tok/s",
    "training_tokens_per_s": "train tok/s", "gradients_applied": "applied", "skipped_reason": "skipped",
    "learning_rate": "lr", "peak_memory_mb": "peak MB", "active_memory_mb": "active MB",
    "clip_ratio_low": "clip_low", "clip_ratio_high": "clip_high", "clip_ratio_region": "clip_region",
    "generation_ms": "gen ms", "scoring_ms": "score ms", "training_ms": "train ms", "created_at": "time",
    "perplexity": "ppl", "token_accuracy": "top1 acc",
}


def step_cell(column: str, value: Any) -> str:
    """A ``steps`` cell: JSON reward means spelled out, times as clock times, numbers compact."""
    if column == "created_at":
        return clock(value)[-5:] if value is not None else MISSING
    if column in ("rewards", "extra_metrics") and isinstance(value, str):
        try:
            means = json.loads(value)
        except ValueError:
            return value
        return " ".join(f"{k}={number(v)}" for k, v in means.items()) if isinstance(means, dict) else value
    if column == "gradients_applied" and value is not None:
        return "yes" if value else "no"
    return number(value)


def tools(statuses: Sequence[str]) -> str:
    """``2 ok``, ``1 ok 1 invalid_json``, or empty for no tool call."""
    counts: dict[str, int] = {}
    for s in statuses:
        counts[s] = counts.get(s, 0) + 1
    return " ".join(f"{n} {s}" for s, n in counts.items())


def sort_rows(rows: list[dict[str, Any]], column: str, descending: bool = False) -> list[dict[str, Any]]:
    """Rows sorted by ``column`` (ties by step), missing values last in either direction."""
    present = [r for r in rows if r.get(column) is not None]
    missing = [r for r in rows if r.get(column) is None]

    def key(r: dict[str, Any]) -> tuple:
        v = r[column]
        return ((0, v) if isinstance(v, (int, float)) else (1, str(v))), r.get("step", 0)

    return sorted(present, key=key, reverse=descending) + missing
