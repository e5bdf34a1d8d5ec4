"""Every step of a run with every metric. ``o`` (or a click on a header) sorts by a column;
enter opens the step's generations."""

from __future__ import annotations

from textual.binding import Binding
from textual.message import Message
from textual.widgets import DataTable

from grpo_tui.tui.db.format import STEP_HEADERS, sort_rows, step_cell
from grpo_tui.tui.db.queries import STEP_COLUMNS
from grpo_tui.tui.inert import inert


class DatabaseStepsTable(DataTable):
    """One row per step; the cursor is a cell so left / right pick the column to sort by."""

    BINDINGS = [Binding("o", "sort_column", "sort by column")]

    class Chosen(Message):
        """The user opened a step (enter)."""

        def __init__(self, step: int) -> None:
            super().__init__()
            self.step = step

    def __init__(self, **kwargs) -> None:
        super().__init__(cursor_type="cell", zebra_stripes=True, **kwargs)
        self.rows_data: list[dict] = []
        self.sort_column = "step"
        self.sort_descending = False

    def on_mount(self) -> None:
        for column in STEP_COLUMNS:
            self.add_column(STEP_HEADERS.get(column, column), key=column)

    def show(self, rows: list[dict]) -> None:
        """Replace the rows (sorted by the current sort), keeping the cursor on the same step."""
        keep = self.selected_step
        self.rows_data = sort_rows(rows, self.sort_column, self.sort_descending)
        column = self.cursor_column
        self.clear()
        for row in self.rows_data:
            # skipped_reason and rewards are worker-written text: keep them inert.
            self.add_row(*(inert(step_cell(c, row.get(c)), single_line=True, limit=60) for c in STEP_COLUMNS),
                         key=str(row["step"]))
        steps = [r["step"] for r in self.rows_data]
        if steps:
            self.move_cursor(row=steps.index(keep) if keep in steps else 0, column=column, animate=False)

    @property
    def selected_step(self) -> int | None:
        if not self.rows_data or not (0 <= self.cursor_row < len(self.rows_data)):
            return None
        return self.rows_data[self.cursor_row]["step"]

    def sort_by(self, column: str) -> None:
        """Sort by ``column``; sorting by the same column again flips the direction."""
        if column == self.sort_column:
            self.sort_descending = not self.sort_descending
        else:
            self.sort_column, self.sort_descending = column, column != "step"
        self.show(self.rows_data)

    def action_sort_column(self) -> None:
        self.sort_by(STEP_COLUMNS[self.cursor_column])

    def on_data_table_header_selected(self, event: DataTable.HeaderSelected) -> None:
        event.stop()
        self.sort_by(str(event.column_key.value))

    def on_data_table_cell_selected(self, event: DataTable.CellSelected) -> None:
        event.stop()
        if self.selected_step is not None:
            self.post_message(self.Chosen(self.selected_step))
