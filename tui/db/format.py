"""How store values look in the Database tab: numbers, times, durations, tool-call summaries.

Pure functions returning plain strings; widgets wrap them (and anything model-written) in inert
``rich.text.Text`` so nothing is parsed as markup.
"""

from __future__ import annotations

import json
import math
import time
from typing import Any, Sequence

# Step columns shown under a shorter header.
STEP_HEADERS = {
    "frac_reward_zero_std": "zero_std", "completion_mean_length": "mean_len",
    "completion_clipped_ratio": "clipped", "generation_tokens_per_s": "gen tok/s",
    "training_tokens_per_s": "train tok/s", "gradients_applied": "applied", "skipped_reason": "skipped",
    "learning_rate": "lr", "peak_memory_mb": "peak MB", "active_memory_mb": "active MB",
    "clip_ratio_low": "clip_low", "clip_ratio_high": "clip_high", "clip_ratio_region": "clip_region",
    "generation_ms": "gen ms", "scoring_ms": "score ms", "training_ms": "train ms", "created_at": "time",
}


def number(value: Any, digits: int = 3) -> str:
    """A compact number: integers as is, floats to ``digits`` significant-ish places, ``–`` for none."""
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            return str(value)
        if value == int(value) and abs(value) < 1e9:
            return str(int(value))
        if value != 0 and (abs(value) < 1e-3 or abs(value) >= 1e6):
            return f"{value:.{digits - 1}e}"
        return f"{value:.{digits}f}".rstrip("0").rstrip(".") if abs(value) < 1000 else f"{value:.0f}"
    return str(value)


def signed(value: float | None, digits: int = 3) -> str:
    return "–" if value is None else f"{value:+.{digits}f}"


def clock(ts: float | None) -> str:
    """Local date and time of a Unix timestamp."""
    if ts is None:
        return "–"
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(ts))


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "–"
    s = int(round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def step_cell(column: str, value: Any) -> str:
    """A ``steps`` cell: JSON reward means spelled out, times as clock times, numbers compact."""
    if column == "created_at":
        return clock(value)[-5:] if value is not None else "–"
    if column == "rewards" and isinstance(value, str):
        try:
            means = json.loads(value)
        except ValueError:
            return value
        return " ".join(f"{k}={number(v, 2)}" for k, v in means.items()) if isinstance(means, dict) else value
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
