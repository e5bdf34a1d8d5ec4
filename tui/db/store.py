"""A read-only connection to a run store, safe to use from Textual thread workers.

The dashboard never writes: the file is opened with ``mode=ro`` plus ``PRAGMA query_only``, and
every query is a single short statement in autocommit mode, so in WAL mode the worker (the only
writer) is never blocked by us and we always see its last committed step.
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path
from typing import Any, Callable, TypeVar
from urllib.parse import quote

from grpo_tui.protocol.schema import StoreError, check_readable

T = TypeVar("T")


def open_readonly(path: str | Path) -> sqlite3.Connection:
    """A read-only connection to a grpo-tui store; ``StoreError`` with one clear sentence if it isn't one."""
    p = Path(path)
    if not p.is_file():
        raise StoreError(f"{path}: no such file")
    uri = f"file:{quote(str(p.resolve()))}?mode=ro"
    conn = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False, timeout=2.0)
    try:
        conn.execute("PRAGMA query_only = 1")
        check_readable(conn)
    except StoreError as exc:
        conn.close()
        raise StoreError(f"{path}: {exc}") from None
    except sqlite3.DatabaseError as exc:
        conn.close()
        raise StoreError(f"{path}: not a grpo-tui store ({exc})") from None
    conn.row_factory = sqlite3.Row
    return conn


class ReadStore:
    """Read-only connections shared by worker threads: one for what the user waits on (pages,
    details), one for background work (counts), so a slow count never delays a page."""

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        self.conn = open_readonly(path)
        self._lock = threading.Lock()
        self._background: sqlite3.Connection | None = None
        self._background_lock = threading.Lock()

    def run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``fn(conn, *args, **kwargs)`` with the interactive connection to ourselves."""
        with self._lock:
            return fn(self.conn, *args, **kwargs)

    def run_background(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Like ``run`` on the second connection."""
        with self._background_lock:
            if self._background is None:
                self._background = open_readonly(self.path)
            return fn(self._background, *args, **kwargs)

    def interrupt(self) -> None:
        """Abort background queries in flight (e.g. a count for a filter already replaced)."""
        if self._background is not None:
            self._background.interrupt()

    def close(self) -> None:
        self.interrupt()
        with self._lock:
            self.conn.close()
        with self._background_lock:
            if self._background is not None:
                self._background.close()
