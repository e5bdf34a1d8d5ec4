"""The Database view's generations level: one page of the generations that match a filter, and the
full record of the highlighted one below it.

Pages are keyset pages (``queries.generations_page``): ``n`` goes to the next, ``b`` back through
the ones visited; the total is counted on the store's background connection, so a slow count never
delays a page. Enter on a row gives the detail the whole pane (``detail-max``) for reading. The view
above says which filter (``open``) and when to read again (``reload``); the pane posts ``PageShown``
when what the status line says about the pages changes.
"""

from __future__ import annotations

from typing import Any

from textual import on
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.message import Message

from grpo_tui.tui.db import Cursor, GenFilter, GenRow, Page
from grpo_tui.tui.db import queries as q
from grpo_tui.tui.widgets.database_generation_detail import DatabaseGenerationDetail
from grpo_tui.tui.widgets.database_generations_table import DatabaseGenerationsTable
from grpo_tui.tui.widgets.database_reader import DatabaseReader
from grpo_tui.tui.widgets.database_table import DatabaseTable


class DatabaseGenerationsPane(Vertical):
    """The generations of ``filter``, a page at a time, and the detail of the one highlighted."""

    class PageShown(Message):
        """A page or the total came in: where we are in the pages (``position``) changed."""

    def __init__(self, reader: DatabaseReader, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.reader = reader
        self.filter = GenFilter()  # the filter of the page shown
        self.page: Page | None = None
        self.page_starts: list[Cursor | None] = [None]  # where each visited page began, for "previous"
        self.total: int | None = None

    def compose(self) -> ComposeResult:
        yield DatabaseGenerationsTable(id="db-gens")
        yield DatabaseGenerationDetail(id="db-detail")

    @property
    def selected(self) -> GenRow | None:
        return self.query_one(DatabaseGenerationsTable).selected

    @property
    def reading(self) -> bool:
        """The detail has the whole pane (enter on a row)."""
        return self.has_class("detail-max")

    def focus_rows(self) -> None:
        self.query_one(DatabaseGenerationsTable).focus()

    def close_detail(self) -> None:
        self.remove_class("detail-max")
        self.focus_rows()

    def position(self) -> str | None:
        """"page 2 · rows 51–100 of 1,234" (None before the first page)."""
        if self.page is None:
            return None
        first = (len(self.page_starts) - 1) * q.PAGE_SIZE + 1
        shown = len(self.page.rows)
        of = f" of {self.total:,}" if self.total is not None else ""
        rows = f"rows {first:,}–{first + shown - 1:,}{of}" if shown else "no generation matches"
        return f"page {len(self.page_starts)} · {rows}"

    def open(self, f: GenFilter) -> None:
        """Show the first page of ``f`` and count its generations."""
        self.filter = f
        self.load_page(None)
        self.total = None
        self.reader.interrupt()  # a count for the previous filter is no longer wanted
        self.reader.query(q.count_generations, f, then=self._show_total, group="db-count", background=True)

    def reload(self) -> None:
        """Read the page shown and the total again (the store may have grown), the cursor kept on its row."""
        if self.page is None:
            return
        selected = self.selected
        self.load_page(self.page.start, keep_id=selected.id if selected else None, starts=self.page_starts)
        self.reader.query(q.count_generations, self.filter, then=self._show_total, group="db-count", background=True)

    def next_page(self) -> None:
        if self.page is not None and self.page.next is not None:
            self.load_page(self.page.next, starts=[*self.page_starts, self.page.next])

    def previous_page(self) -> None:
        if len(self.page_starts) > 1:
            starts = self.page_starts[:-1]
            self.load_page(starts[-1], starts=starts)

    def load_page(self, start: Cursor | None, keep_id: int | None = None, starts: list | None = None) -> None:
        def show(page: Page) -> None:
            self.page = page
            self.page_starts = starts if starts is not None else [None]
            self.query_one(DatabaseGenerationsTable).show(page.rows, keep_id)
            self.post_message(self.PageShown())

        self.reader.query(q.generations_page, self.filter, start, then=show)

    def _show_total(self, total: int) -> None:
        self.total = total
        self.post_message(self.PageShown())

    def _show_detail(self, detail: q.GenDetail | None) -> None:
        self.query_one(DatabaseGenerationDetail).show(detail, "This generation is no longer in the store.",
                                                      search=self.filter.text)

    @on(DatabaseTable.Highlighted, "#db-gens")
    def _generation_highlighted(self, event: DatabaseTable.Highlighted) -> None:
        if event.row is None:
            self.query_one(DatabaseGenerationDetail).show(None, "No generation matches this filter.")
        else:
            self.reader.query(q.generation, event.row.id, then=self._show_detail, group="db-detail")

    @on(DatabaseTable.Chosen, "#db-gens")
    def _generation_chosen(self, event: DatabaseTable.Chosen) -> None:
        """Enter: the detail pane takes the whole view and the focus, for reading and scrolling."""
        self.add_class("detail-max")
        self.query_one(DatabaseGenerationDetail).focus()
