"""Stands in the Database tab until the store browser (issue 6) replaces it.

The app calls ``set_database(path, run_id)`` on the widget with id ``database-view`` when the
worker announces its store; a replacement widget should keep that method.
"""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from grpo_tui.tui.inert import clean


class DatabasePlaceholder(Static):
    def on_mount(self) -> None:
        self.update(Text("The run's store appears here once the worker opens it.", "dim"))

    def set_database(self, path: str, run_id: int) -> None:
        self.update(Text(f"Store: {clean(path, single_line=True)} (run {run_id})\nThe database browser is not built yet."))
