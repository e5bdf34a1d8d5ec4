"""A table of rows that also moves with mlx-node's (and vi's) keys: ``j`` / ``k`` a row down / up,
``G`` the last row (``tui/keys.py``'s ``TABLE_KEYS``). The Samples and Database tables are these."""

from __future__ import annotations

from collections.abc import Iterable
from typing import ClassVar

from textual.binding import BindingType
from textual.widgets import DataTable
from textual.widgets.data_table import RowKey

from grpo_tui.tui.keys import TABLE_KEYS


class ListTable(DataTable):
    BINDINGS: ClassVar[list[BindingType]] = [*TABLE_KEYS]

    def _update_dimensions(self, new_rows: Iterable[RowKey]) -> None:
        # DataTable fits its columns to new rows only when idle, and caches each cell's drawing
        # without its width: a frame painted between ``add_row`` and that idle moment (a busy
        # machine) left the cells cut to their headers' widths until the next cursor move.
        super()._update_dimensions(new_rows)
        self._update_count += 1
        self._clear_caches()
        self.refresh()
