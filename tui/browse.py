"""``grpo-tui browse outputs.db``: the Database view of a run store, without training."""

from __future__ import annotations

import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.widgets import Footer, Header

from grpo_tui.protocol.schema import StoreError
from grpo_tui.tui.db import open_readonly
from grpo_tui.tui.screens.database_dialogs import HostsDatabaseDialogs
from grpo_tui.tui.widgets.database_view import DatabaseView


class BrowseApp(HostsDatabaseDialogs, App):
    """The whole screen is one ``DatabaseView``."""

    TITLE = "grpo-tui browse"
    BINDINGS = [Binding("q", "quit", "quit"), Binding("ctrl+c", "quit", "quit", show=False)]

    def __init__(self, db_path: str, run_id: int | None = None, refresh_seconds: float = 10.0, title: str | None = None) -> None:
        super().__init__()
        self.db_path, self.run_id, self.refresh_seconds = db_path, run_id, refresh_seconds
        self.sub_title = title or db_path

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


@contextmanager
def browsable(db_path: str) -> Iterator[BrowseApp]:
    """The browser for ``db_path``: a grpo-tui store as it is; an mlx-node store copied once into a
    grpo-tui store in a temporary folder (removed after), its own file never written. ``StoreError``
    with one sentence for anything else."""
    from grpo_tui.tui.db.mlx_node import copy_as_grpo_store, is_mlx_node_store

    if not is_mlx_node_store(db_path):
        if (problem := check_store(db_path)) is not None:
            raise StoreError(problem)
        yield BrowseApp(db_path)
        return
    with tempfile.TemporaryDirectory(prefix="grpo-tui-mlx-node-") as folder:
        copy = copy_as_grpo_store(db_path, Path(folder) / "outputs.db")
        yield BrowseApp(str(copy), refresh_seconds=3600.0, title=f"{db_path} (an mlx-node store, read once)")


def run_browser(db_path: str) -> int:
    try:
        with browsable(db_path) as app:
            app.run()
    except StoreError as exc:
        print(f"grpo-tui: {exc}.", file=sys.stderr)
        return 2
    return 0
