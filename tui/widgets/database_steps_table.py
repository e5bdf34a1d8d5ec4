"""Every step of a run with every metric. ``o`` (or a click on a header) sorts by a column;
enter opens the step's generations."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.console import RenderableType
from textual.binding import Binding
from textual.widgets import DataTable

from grpo_tui.tui.db.format import STEP_HEADERS, sort_rows, step_cell
from grpo_tui.tui.db.queries import STEP_COLUMNS
from grpo_tui.tui.inert_text import inert
from grpo_tui.tui.widgets.database_table import DatabaseTable


class DatabaseStepsTable(DatabaseTable[dict[str, Any]]):
    """One row per step; the cursor is a cell so left / right pick the column to sort by."""

    COLUMNS = {c: STEP_HEADERS.get(c, c) for c in STEP_COLUMNS}
    CURSOR = "cell"
    BINDINGS = [Binding("o", "sort_column", "sort by column")]

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)
        self.sort_column = "step"
        self.sort_descending = False

    def key(self, row: dict[str, Any]) -> int:
        return row["step"]

    def cells(self, row: dict[str, Any]) -> Sequence[RenderableType]:
        # skipped_reason and rewards are worker-written text: keep them inert.
        return [inert(step_cell(c, row.get(c)), single_line=True, limit=60) for c in STEP_COLUMNS]

    def ordered(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return sort_rows(rows, self.sort_column, self.sort_descending)

    def sort_by(self, column: str) -> None:
        """Sort by ``column``; sorting by the same column again flips the direction."""
        if column == self.sort_column:
            self.sort_descending = not self.sort_descending
        else:
            self.sort_column, self.sort_descending = column, column != "step"
        self.show_keeping(self.rows_data)

    def action_sort_column(self) -> None:
        self.sort_by(STEP_COLUMNS[self.cursor_column])

    def on_data_table_header_selected(self, event: DataTable.HeaderSelected) -> None:
        event.stop()
        self.sort_by(str(event.column_key.value))
