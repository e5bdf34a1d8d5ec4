"""A table of rows that also moves with mlx-node's (and vi's) keys: ``j`` / ``k`` a row down / up,
``G`` the last row (``tui/keys.py``'s ``TABLE_KEYS``). The Samples and Database tables are these."""

from __future__ import annotations

from typing import ClassVar

from textual.binding import BindingType
from textual.widgets import DataTable

from grpo_tui.tui.keys import TABLE_KEYS


class ListTable(DataTable):
    BINDINGS: ClassVar[list[BindingType]] = [*TABLE_KEYS]
