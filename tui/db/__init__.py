"""Read-only access to a run store for the Database tab and ``grpo-tui browse``.

Pure functions over a read-only sqlite connection: ``store`` opens it, ``filters`` turns what the
user asked for into parameterised SQL, ``queries`` reads runs / steps / generation pages, ``export``
writes a filter to JSONL or CSV. Nothing here writes to the store or imports Textual.
"""

from grpo_tui.tui.db.filters import GenFilter
from grpo_tui.tui.db.queries import Cursor, GenDetail, GenRow, Page, QueryError, Run
from grpo_tui.tui.db.store import ReadStore, open_readonly

__all__ = ["Cursor", "GenDetail", "GenFilter", "GenRow", "Page", "QueryError", "ReadStore", "Run", "open_readonly"]
