"""``grpo-tui browse outputs.db``: the Database view of a run store, without training."""

from __future__ import annotations

import sys

from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.widgets import Footer, Header

from grpo_tui.protocol.schema import StoreError
from grpo_tui.tui.db import open_readonly
from grpo_tui.tui.widgets.database_view import DatabaseView


class BrowseApp(App):
    """The whole screen is one ``DatabaseView``."""

    TITLE = "grpo-tui browse"
    BINDINGS = [Binding("q", "quit", "quit"), Binding("ctrl+c", "quit", "quit", show=False)]

    def __init__(self, db_path: str, run_id: int | None = None, refresh_seconds: float = 10.0) -> None:
        super().__init__()
        self.db_path, self.run_id, self.refresh_seconds = db_path, run_id, refresh_seconds
        self.sub_title = db_path

    def compose(self) -> ComposeResult:
        yield Header()
        yield DatabaseView(self.db_path, self.run_id, refresh_seconds=self.refresh_seconds, id="database")
        yield Footer()


def check_store(db_path: str) -> str | None:
    """None if ``db_path`` is a store this version can read, else one sentence saying why not."""
    try:
        open_readonly(db_path).close()
    except StoreError as exc:
        return str(exc)
    return None


def run_browser(db_path: str) -> int:
    problem = check_store(db_path)
    if problem is not None:
        print(f"grpo-tui: {problem}.", file=sys.stderr)
        return 2
    BrowseApp(db_path).run()
    return 0
