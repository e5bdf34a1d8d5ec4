"""The table the Database tab's three levels share: store rows as a ``DataTable`` that keeps its
cursor on the same row across refreshes and announces the row highlighted and the row chosen.

A level's table (``database_runs_table``, ``database_steps_table``, ``database_generations_table``)
says only what differs: its columns and how a row becomes cells. The widget that holds a table
(``DatabaseView``, ``DatabaseGenerationsPane``) runs its queries and tells the tables apart by their
ids (``@on(DatabaseTable.Chosen, "#db-runs")``).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any, ClassVar, Generic, TypeVar

from rich.console import RenderableType
from textual.message import Message
from textual.widgets import DataTable

from grpo_tui.tui.widgets.list_table import ListTable

Row = TypeVar("Row")


class RowMessage(Message):
    """A table's row, for the view that holds the table (``@on(..., "#db-runs")`` tells them apart)."""

    def __init__(self, table: DatabaseTable, row: Any) -> None:
        super().__init__()
        self.table, self.row = table, row

    @property
    def control(self) -> DatabaseTable:
        return self.table


class DatabaseTable(ListTable, Generic[Row]):
    """Store rows of one kind. Subclasses set ``COLUMNS`` (key → header) and ``key`` / ``cells``."""

    COLUMNS: ClassVar[dict[str, str]] = {}
    CURSOR: ClassVar[str] = "row"  # "cell" where left / right pick a column (the steps table sorts by it)

    class Highlighted(RowMessage):
        """The cursor is on ``row`` (None: the table is empty)."""

    class Chosen(RowMessage):
        """The user opened ``row`` (enter, or a click on the selected row)."""

    def __init__(self, **kwargs: object) -> None:
        super().__init__(cursor_type=self.CURSOR, zebra_stripes=True, **kwargs)  # type: ignore[arg-type]
        self.rows_data: list[Row] = []

    def key(self, row: Row) -> Hashable:
        raise NotImplementedError

    def cells(self, row: Row) -> Sequence[RenderableType]:
        raise NotImplementedError

    def ordered(self, rows: list[Row]) -> list[Row]:
        """The rows in the order shown (as queried, unless the table sorts them itself)."""
        return rows

    def on_mount(self) -> None:
        for key, header in self.COLUMNS.items():
            self.add_column(header, key=key)

    def show(self, rows: list[Row], keep: Hashable | None = None) -> None:
        """Replace the rows; the cursor goes to the row whose key is ``keep`` if it is here, else to
        the top (in the column it was in). The same rows with the cursor staying put redraw nothing
        (a live refresh that found nothing new must not blank the column widths until the next idle)."""
        ordered = self.ordered(rows)
        if ordered == self.rows_data and keep is not None and self.selected is not None and keep == self.key(self.selected):
            return
        self.rows_data = ordered
        column = self.cursor_column
        self.clear()
        for row in self.rows_data:
            self.add_row(*self.cells(row), key=str(self.key(row)))
        keys = [self.key(r) for r in self.rows_data]
        if keys:
            self.move_cursor(row=keys.index(keep) if keep in keys else 0, column=column, animate=False)
        self.post_message(self.Highlighted(self, self.selected))

    def show_keeping(self, rows: list[Row]) -> None:
        """``show``, the cursor staying on the row it is on (a refresh of the same rows)."""
        self.show(rows, None if self.selected is None else self.key(self.selected))

    @property
    def selected(self) -> Row | None:
        if not self.rows_data or not (0 <= self.cursor_row < len(self.rows_data)):
            return None
        return self.rows_data[self.cursor_row]

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        event.stop()
        self.post_message(self.Highlighted(self, self.selected))

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        self._choose()

    def on_data_table_cell_selected(self, event: DataTable.CellSelected) -> None:
        event.stop()
        self._choose()

    def _choose(self) -> None:
        if (row := self.selected) is not None:
            self.post_message(self.Chosen(self, row))
