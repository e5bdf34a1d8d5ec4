"""The runs of a store: name, status, steps, best / last reward, start, duration. Enter opens a run."""

from __future__ import annotations

from rich.text import Text
from textual.message import Message
from textual.widgets import DataTable

from grpo_tui.tui.db import Run
from grpo_tui.tui.format import MISSING, clock, duration, number
from grpo_tui.tui.inert import inert
from grpo_tui.tui.status_style import status_style


class DatabaseRunsTable(DataTable):
    """One row per run, newest first."""

    class Chosen(Message):
        """The user opened a run (enter)."""

        def __init__(self, run: Run) -> None:
            super().__init__()
            self.run = run

    def __init__(self, **kwargs) -> None:
        super().__init__(cursor_type="row", zebra_stripes=True, **kwargs)
        self.runs: list[Run] = []

    def on_mount(self) -> None:
        for label in ("id", "run", "status", "steps", "best reward", "last reward", "started", "duration", "model"):
            self.add_column(label, key=label)

    def show(self, runs: list[Run]) -> None:
        """Replace the rows, keeping the cursor on the same run."""
        keep = self.selected.id if self.selected else None
        self.runs = runs
        self.clear()
        for run in runs:
            steps = f"{run.steps}/{run.total_steps}" if run.total_steps else str(run.steps)
            self.add_row(
                str(run.id), inert(run.name, single_line=True, limit=40),
                Text(run.status, style=status_style(run.status)), steps,
                number(run.best_reward), number(run.last_reward), clock(run.started_at),
                duration(run.duration_s), inert(run.model or MISSING, single_line=True, limit=30), key=str(run.id),
            )
        ids = [r.id for r in runs]
        if keep in ids:
            self.move_cursor(row=ids.index(keep), animate=False)

    @property
    def selected(self) -> Run | None:
        if not self.runs or not (0 <= self.cursor_row < len(self.runs)):
            return None
        return self.runs[self.cursor_row]

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        if self.selected:
            self.post_message(self.Chosen(self.selected))
