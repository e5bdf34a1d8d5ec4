"""The Database view's reads: its store, opened read-only, and each query run in a thread worker.

A query's result reaches the UI thread (``then``) unless a newer query of its group replaced it
(the workers of a group are exclusive), so a fast user never sees an old page over a new one. A
query that fails says so in one line (``on_error``); nothing here writes to the store.
"""

from __future__ import annotations

import sqlite3
from typing import Any, Callable, TypeVar

from textual.widget import Widget
from textual.worker import get_current_worker

from grpo_tui.tui.db import QueryError, ReadStore

T = TypeVar("T")


class DatabaseReader:
    """The store of one view (``owner``: its thread workers are the owner's, and end with it)."""

    def __init__(self, owner: Widget, on_error: Callable[[str], None]) -> None:
        self.owner, self.on_error = owner, on_error
        self.store: ReadStore | None = None

    def open(self, path: str) -> None:
        """Open ``path`` (``StoreError`` with one clear sentence if it is not a store)."""
        self.store = ReadStore(path)

    def close(self) -> None:
        if self.store is not None:
            self.store.close()
            self.store = None

    def interrupt(self) -> None:
        """Cancel the background query under way (a count that is no longer wanted)."""
        if self.store is not None:
            self.store.interrupt()

    def query(self, fn: Callable[..., T], *args: Any, then: Callable[[T], None], group: str = "db-page",
              background: bool = False) -> None:
        """Run ``fn(conn, *args)`` in a thread (on the background connection if ``background``);
        ``then(result)`` on the UI thread unless superseded."""
        store = self.store
        if store is None:
            return
        app = self.owner.app

        def work() -> None:
            worker = get_current_worker()
            try:
                result = (store.run_background if background else store.run)(fn, *args)
            except QueryError as exc:
                if not worker.is_cancelled:
                    app.call_from_thread(self.on_error, str(exc))
                return
            except sqlite3.Error as exc:
                if not worker.is_cancelled:
                    app.call_from_thread(self.on_error, f"store error: {exc}")
                return
            if not worker.is_cancelled:
                app.call_from_thread(then, result)

        self.owner.run_worker(work, thread=True, exclusive=True, group=group)
