"""The Database view: runs → steps → generations of a store, with filters, search, keyset pages,
a detail pane, export and run comparison.

Self-contained: construct it with a store path (and optionally the run to open) and it works as
the dashboard's Database tab or as the whole screen of ``grpo-tui browse``. It reads through
read-only connections in thread workers, refreshes on a slow timer while visible, and never writes.
"""

from __future__ import annotations

import sqlite3
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.widgets import ContentSwitcher, DataTable, Input, Static
from textual.worker import get_current_worker

from grpo_tui.protocol.schema import StoreError
from grpo_tui.tui.db import Cursor, GenFilter, Page, QueryError, ReadStore, Run
from grpo_tui.tui.db import queries as q
from grpo_tui.tui.inert import clean
from grpo_tui.tui.widgets.database_filter_bar import DatabaseFilterBar
from grpo_tui.tui.widgets.database_generation_detail import DatabaseGenerationDetail
from grpo_tui.tui.widgets.database_generations_table import DatabaseGenerationsTable
from grpo_tui.tui.widgets.database_runs_table import DatabaseRunsTable
from grpo_tui.tui.widgets.database_steps_table import DatabaseStepsTable
from grpo_tui.tui.widgets.database_table import DatabaseTable

LEVELS = ("runs", "steps", "generations")
TABLES = {"runs": "db-runs", "steps": "db-steps", "generations": "db-gens"}  # each level's table, by id
HINTS = {
    "runs": "enter open run · c compare · F5 refresh",
    "steps": "enter step's generations · a all generations · o sort by column · esc back · c compare",
    "generations": "enter detail · g group · n/b next/prev page · / search · f filters · e export · esc back",
}


class DatabaseView(Vertical):
    """Browse a run store. ``set_store`` switches to another store / run (e.g. when a run starts)."""

    DEFAULT_CSS = (Path(__file__).with_name("database.tcss")).read_text()
    BINDINGS = [
        Binding("escape,backspace", "back", "back"),
        Binding("slash", "search", "search"),
        Binding("f", "filters", "filters"),
        Binding("x", "clear_filter", "clear filter"),
        Binding("o", "sort", "sort"),
        Binding("n,right_square_bracket", "next_page", "next page"),
        Binding("b,left_square_bracket", "previous_page", "prev page"),
        Binding("g", "group", "group"),
        Binding("a", "all_generations", "all generations", show=False),
        Binding("e", "export", "export"),
        Binding("c", "compare", "compare runs"),
        Binding("f5,ctrl+r", "reload", "refresh"),
    ]

    def __init__(self, db_path: str | None = None, run_id: int | None = None, *,
                 refresh_seconds: float = 10.0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.db_path, self.initial_run_id = db_path, run_id
        self.refresh_seconds = refresh_seconds
        self.store: ReadStore | None = None
        self.level = "runs"
        self.run_row: Run | None = None
        self.filter = GenFilter()
        self.before_group: GenFilter | None = None
        self.page: Page | None = None
        self.page_starts: list[Cursor | None] = [None]  # where each visited page began, for "previous"
        self.total: int | None = None
        self.last_refresh = 0.0
        self._connect_when_shown = False  # set_store while hidden: connect on the first showing

    def compose(self) -> ComposeResult:
        yield Static(id="db-crumbs")
        yield DatabaseFilterBar(id="db-filter")
        with ContentSwitcher(initial="db-runs"):
            yield DatabaseRunsTable(id="db-runs")
            yield DatabaseStepsTable(id="db-steps")
            with Vertical(id="db-gens-pane"):
                yield DatabaseGenerationsTable(id="db-gens")
                yield DatabaseGenerationDetail(id="db-detail")
        yield Static(id="db-status")

    def on_mount(self) -> None:
        self._connect()
        self.set_interval(self.refresh_seconds, self._tick)

    def on_unmount(self) -> None:
        if self.store is not None:
            self.store.close()

    # ------------------------------------------------------------------ store and level

    def set_store(self, db_path: str, run_id: int | None = None) -> None:
        """Browse another store, or the same one at another run; the same store and run again is a no-op."""
        if self.store is not None and (db_path, run_id) == (self.db_path, self.initial_run_id):
            return
        if self.store is not None and db_path != self.db_path:
            self.store.close()
            self.store = None
        self.db_path, self.initial_run_id = db_path, run_id
        if self.is_on_screen:
            self._connect()
        else:  # a hidden tab reads nothing: the store is opened when the tab is first shown
            self._connect_when_shown = True
            self._crumbs()

    def _connect(self) -> None:
        self._crumbs()
        if self.store is None:
            if not self.db_path:
                self._status("No run store yet: it appears once the worker has started.")
                return
            try:
                self.store = ReadStore(self.db_path)
            except StoreError as exc:
                self._status(str(exc), error=True)
                return
        self._query(q.runs, then=self._first_runs)

    def _first_runs(self, runs: list[Run]) -> None:
        self.query_one(DatabaseRunsTable).show_keeping(runs)
        wanted = self.initial_run_id if self.initial_run_id is not None else (runs[0].id if len(runs) == 1 else None)
        run = next((r for r in runs if r.id == wanted), None)
        if run is not None:
            self.open_run(run)
        else:
            self._set_level("runs")

    def _set_level(self, level: str) -> None:
        self.level = level
        for name in LEVELS:
            self.set_class(name == level, name)
        self.query_one(ContentSwitcher).current = "db-gens-pane" if level == "generations" else TABLES[level]
        focused = self.app.focused
        if focused is None or self in focused.ancestors:  # never pull focus out of another dashboard tab
            self.focus_table()
        self._crumbs()
        self._status()
        self.refresh_bindings()

    def focus_table(self) -> None:
        """Focus the table of the level shown (the dashboard calls it when the tab is shown; on the
        tab's first showing it may come before the tables are composed: then the first level focuses it)."""
        for table in self.query(f"#{TABLES[self.level]}").results(DatabaseTable):
            table.focus()

    def _crumbs(self) -> None:
        parts = [Text(Path(self.db_path or "no store").name, style="bold")]
        if self.run_row and self.level != "runs":
            parts.append(Text.assemble(clean(self.run_row.name, single_line=True), (f" #{self.run_row.id}", "dim"),
                                       (f" {self.run_row.status}", "italic")))
        if self.level == "generations":
            parts.append(Text("generations" if self.filter.prompt_index is None else "group"))
        elif self.level == "steps":
            parts.append(Text("steps"))
        self.query_one("#db-crumbs", Static).update(Text(" › ").join(parts))

    def _status(self, message: str | None = None, error: bool = False) -> None:
        """The bottom line: a message, or where we are in the pages plus key hints."""
        status = self.query_one("#db-status", Static)
        status.set_class(error, "error")
        if message is None:
            message = HINTS[self.level]
            if self.level == "generations" and self.page is not None:
                first = (len(self.page_starts) - 1) * q.PAGE_SIZE + 1
                shown = len(self.page.rows)
                of = f" of {self.total:,}" if self.total is not None else ""
                rows = f"rows {first:,}–{first + shown - 1:,}{of}" if shown else "no generation matches"
                message = f"page {len(self.page_starts)} · {rows} · {message}"
        status.update(Text(message))

    # ------------------------------------------------------------------ background queries

    def _query(self, fn: Callable[..., Any], *args: Any, then: Callable[[Any], None], group: str = "db-page",
               background: bool = False) -> None:
        """Run ``fn(conn, *args)`` in a thread; ``then(result)`` on the UI thread unless superseded."""
        store = self.store
        if store is None:
            return

        def work() -> None:
            worker = get_current_worker()
            try:
                result = (store.run_background if background else store.run)(fn, *args)
            except QueryError as exc:
                if not worker.is_cancelled:
                    self.app.call_from_thread(self._failed, str(exc))
                return
            except sqlite3.Error as exc:
                if not worker.is_cancelled:
                    self.app.call_from_thread(self._failed, f"store error: {exc}")
                return
            if not worker.is_cancelled:
                self.app.call_from_thread(then, result)

        self.run_worker(work, thread=True, exclusive=True, group=group)

    def _failed(self, message: str) -> None:
        self._status(message, error=True)

    # ------------------------------------------------------------------ navigation

    def open_run(self, run: Run) -> None:
        self.run_row = run
        self.filter = GenFilter(run_id=run.id, sort=self.filter.sort, descending=self.filter.descending)
        self.before_group = None
        self._set_level("steps")
        self._query(q.steps, run.id, then=self.query_one(DatabaseStepsTable).show_keeping, group="db-steps")

    def open_generations(self, f: GenFilter) -> None:
        """Show the first page of ``f`` (replacing the current filter)."""
        self.filter = f
        self.query_one(DatabaseFilterBar).show(f)
        if self.level != "generations":
            self._set_level("generations")
        self._crumbs()
        self.load_page(None)
        self.total = None
        if self.store is not None:
            self.store.interrupt()  # a count for the previous filter is no longer wanted
        self._query(q.count_generations, f, then=self._show_total, group="db-count", background=True)

    def load_page(self, start: Cursor | None, keep_id: int | None = None, starts: list | None = None) -> None:
        def show(page: Page) -> None:
            self.page = page
            self.page_starts = starts if starts is not None else [None]
            self.query_one(DatabaseGenerationsTable).show(page.rows, keep_id)
            self._status()

        self._query(q.generations_page, self.filter, start, then=show)

    def _show_total(self, total: int) -> None:
        self.total = total
        if self.level == "generations":
            self._status()

    def _show_detail(self, detail: q.GenDetail | None) -> None:
        self.query_one(DatabaseGenerationDetail).show(detail, "This generation is no longer in the store.",
                                                      search=self.filter.text)

    @on(DatabaseTable.Chosen, "#db-runs")
    def _run_chosen(self, event: DatabaseTable.Chosen) -> None:
        self.open_run(event.row)

    @on(DatabaseTable.Chosen, "#db-steps")
    def _step_chosen(self, event: DatabaseTable.Chosen) -> None:
        self.before_group = None
        step = event.row["step"]
        self.open_generations(replace(self.filter.cleared(), step_min=step, step_max=step))

    @on(DatabaseTable.Highlighted, "#db-gens")
    def _generation_highlighted(self, event: DatabaseTable.Highlighted) -> None:
        if event.row is None:
            self.query_one(DatabaseGenerationDetail).show(None, "No generation matches this filter.")
        else:
            self._query(q.generation, event.row.id, then=self._show_detail, group="db-detail")

    @on(DatabaseTable.Chosen, "#db-gens")
    def _generation_chosen(self, event: DatabaseTable.Chosen) -> None:
        """Enter: the detail pane takes the whole view and the focus, for reading and scrolling."""
        self.query_one("#db-gens-pane").add_class("detail-max")
        self.query_one(DatabaseGenerationDetail).focus()

    @on(DatabaseFilterBar.Changed)
    def _filter_changed(self, event: DatabaseFilterBar.Changed) -> None:
        self.open_generations(replace(event.filter, run_id=self.filter.run_id))
        if event.errors:
            self._status(f"ignored (not a number): {', '.join(event.errors)}", error=True)
        if event.from_search:
            self.query_one(DatabaseGenerationsTable).focus()

    def on_data_table_header_selected(self, event: DataTable.HeaderSelected) -> None:
        event.stop()  # only the steps table sorts by header (it handles that itself)

    # ------------------------------------------------------------------ actions

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Only the keys that do something at this level show in the footer."""
        if action in ("clear_filter", "sort", "next_page", "previous_page", "group", "export"):
            return self.level == "generations"
        if action in ("search", "filters", "all_generations"):
            return self.run_row is not None
        if action == "back":
            return self.level != "runs"
        return True

    def action_back(self) -> None:
        pane = self.query_one("#db-gens-pane")
        focused = self.app.focused
        if self.level == "generations" and pane.has_class("detail-max"):
            pane.remove_class("detail-max")
            self.query_one(DatabaseGenerationsTable).focus()
        elif focused is not None and self.query_one(DatabaseFilterBar) in focused.ancestors_with_self:
            self.query_one(DatabaseGenerationsTable).focus()
        elif self.level == "generations" and self.before_group is not None:
            previous, self.before_group = self.before_group, None
            self.open_generations(previous)
        elif self.level == "generations":
            self._set_level("steps")
        elif self.level == "steps":
            self._set_level("runs")

    def action_search(self) -> None:
        if self.run_row is None:
            return
        if self.level != "generations":
            self.open_generations(self.filter)
        self.query_one("#db-search", Input).focus()

    def action_filters(self) -> None:
        if self.run_row is None:
            return
        if self.level != "generations":
            self.open_generations(self.filter)
        self.query_one(DatabaseFilterBar).toggle_form()

    def action_clear_filter(self) -> None:
        if self.level == "generations":
            self.before_group = None
            self.open_generations(self.filter.cleared())

    def action_sort(self) -> None:
        if self.level == "generations":
            self.open_generations(self.filter.with_next_sort())

    def action_all_generations(self) -> None:
        if self.run_row is not None:
            self.open_generations(self.filter.cleared())

    def action_next_page(self) -> None:
        if self.level == "generations" and self.page is not None and self.page.next is not None:
            self.load_page(self.page.next, starts=[*self.page_starts, self.page.next])

    def action_previous_page(self) -> None:
        if self.level == "generations" and len(self.page_starts) > 1:
            starts = self.page_starts[:-1]
            self.load_page(starts[-1], starts=starts)

    def action_group(self) -> None:
        row = self.query_one(DatabaseGenerationsTable).selected
        if self.level == "generations" and row is not None and self.filter.prompt_index is None:
            self.before_group = self.filter
            self.open_generations(q.group_filter(row))

    def action_export(self) -> None:
        if self.level != "generations" or self.store is None:
            return
        from grpo_tui.tui.screens.export_dialog import ExportDialog

        name = "".join(ch if ch.isalnum() or ch in "-_" else "-" for ch in (self.run_row.name if self.run_row else "run"))
        default = f"{name}-generations-{time.strftime('%Y%m%d-%H%M%S')}.jsonl"
        self.app.push_screen(ExportDialog(self.store.path, self.filter, default))

    def action_compare(self) -> None:
        if self.store is None:
            return
        from grpo_tui.tui.screens.database_compare import DatabaseCompareScreen

        first = self.run_row.id if self.run_row and self.level != "runs" else None
        if first is None and (selected := self.query_one(DatabaseRunsTable).selected) is not None:
            first = selected.id
        self.app.push_screen(DatabaseCompareScreen(self.store, first))

    def action_reload(self) -> None:
        """Re-read what is on screen (the store may have grown), keeping the cursor where it is."""
        self.last_refresh = time.monotonic()
        if self.store is None:
            self._connect()
            return
        self._query(q.runs, then=self._refresh_runs, group="db-runs")
        if self.level == "steps" and self.run_row is not None:
            self._query(q.steps, self.run_row.id, then=self.query_one(DatabaseStepsTable).show_keeping, group="db-steps")
        elif self.level == "generations" and self.page is not None:
            selected = self.query_one(DatabaseGenerationsTable).selected
            self.load_page(self.page.start, keep_id=selected.id if selected else None, starts=self.page_starts)
            self._query(q.count_generations, self.filter, then=self._show_total, group="db-count", background=True)

    def _refresh_runs(self, runs: list[Run]) -> None:
        self.query_one(DatabaseRunsTable).show_keeping(runs)
        if self.run_row is not None:
            self.run_row = next((r for r in runs if r.id == self.run_row.id), self.run_row)
            self._crumbs()

    def on_show(self) -> None:
        """Switching to the Database tab shows the store as it is now, not as of the last timer tick."""
        if self._connect_when_shown:
            self._connect_when_shown = False
            self._connect()
        elif self.store is not None and time.monotonic() - self.last_refresh > 2.0:
            self.action_reload()

    def _tick(self) -> None:
        # Live refresh only while someone can see us, and not while a detail is being read.
        if self.is_on_screen and self._connect_when_shown:
            self.on_show()
        elif self.is_on_screen and not self.query_one("#db-gens-pane").has_class("detail-max"):
            self.action_reload()
