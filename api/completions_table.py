"""``log_completions=True``: a table of a step's completions in the terminal, as TRL prints one
(``trl.trainer.utils.print_prompt_completions_sample``): prompt, completion, each reward function's
score and the advantage, ``num_completions_to_print`` rows (all when None), read from the run's
store (every generation of the step is there once its ``step`` frame is out)."""

from __future__ import annotations

import json
import sqlite3
import sys
from pathlib import Path
from typing import Any


def step_rows(db: Path, run_id: int, step: int) -> list[dict[str, Any]]:
    """The step's completions: ``prompt``, ``completion``, ``rewards`` (per function), ``advantage``."""
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5) as conn:
        found = conn.execute(
            "SELECT prompt, completion, reward_details, advantage FROM generations WHERE run_id = ? AND step = ? "
            "ORDER BY id", (run_id, step)).fetchall()
    rows = []
    for prompt, completion, details, advantage in found:
        rewards = json.loads(details) if details else {}
        rows.append({"prompt": prompt, "completion": completion,
                     "rewards": rewards if isinstance(rewards, dict) else {}, "advantage": advantage})
    return rows


def print_completions(db: Path, run_id: int, step: int, limit: int | None) -> None:
    rows = step_rows(db, run_id, step)
    if limit is not None:
        rows = rows[: max(int(limit), 0)]
    if not rows:
        return
    from rich.console import Console
    from rich.panel import Panel
    from rich.table import Table

    table = Table(show_header=True, header_style="bold white", expand=True)
    table.add_column("Prompt", style="bright_yellow")
    table.add_column("Completion", style="bright_green")
    names = list(dict.fromkeys(name for row in rows for name in row["rewards"]))
    for name in names:
        table.add_column(name, style="bold cyan", justify="right")
    table.add_column("Advantage", style="bold magenta", justify="right")
    for row in rows:
        scores = [_number(row["rewards"].get(name)) for name in names]
        table.add_row(row["prompt"], row["completion"], *scores, _number(row["advantage"]))
        table.add_section()
    Console(file=sys.stdout).print(Panel(table, expand=False, title=f"Step {step}", border_style="bold white"))


def _number(value: Any) -> str:
    return "-" if value is None else f"{float(value):.2f}"


__all__ = ["print_completions", "step_rows"]
