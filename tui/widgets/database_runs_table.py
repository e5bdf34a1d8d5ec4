"""The runs of a store: name, status, steps, best / last reward, start, duration. Enter opens a run."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import RenderableType
from rich.text import Text

from grpo_tui.tui.db import Run
from grpo_tui.tui.format import MISSING, clock, duration, number
from grpo_tui.tui.inert_text import inert
from grpo_tui.tui.status_style import status_style
from grpo_tui.tui.widgets.database_table import DatabaseTable


class DatabaseRunsTable(DatabaseTable[Run]):
    """One row per run, newest first."""

    COLUMNS = {c: c for c in ("id", "run", "status", "steps", "best reward", "last reward", "started", "duration",
                              "model")}

    def key(self, row: Run) -> int:
        return row.id

    def cells(self, row: Run) -> Sequence[RenderableType]:
        steps = f"{row.steps}/{row.total_steps}" if row.total_steps else str(row.steps)
        return (
            str(row.id), inert(row.name, single_line=True, limit=40), Text(row.status, style=status_style(row.status)),
            steps, number(row.best_reward), number(row.last_reward), clock(row.started_at), duration(row.duration_s),
            inert(row.model or MISSING, single_line=True, limit=30),
        )
