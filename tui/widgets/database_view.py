"""The Database view: runs → steps → generations of a store, with filters, search, keyset pages,
a detail pane, export and run comparison.

Self-contained: construct it with a store path (and optionally the run to open) and it works as
the dashboard's Database tab or as the whole screen of ``grpo-tui browse``. It reads through
read-only connections in thread workers (``database_reader``), refreshes on a slow timer while
visible, and never writes.

This module is the navigation: which level is shown, the run open, the filter, the keys. Each pane
is its own widget: ``database_crumbs`` (top line), ``database_filter_bar``, the runs and steps
tables, ``database_generations_pane`` (a page of generations, its paging and the detail) and
``database_status`` (bottom line). Attributes go down (``open``, ``show``); messages come up
(``DatabaseTable.Chosen``, ``DatabaseFilterBar.Changed``, ``DatabaseGenerationsPane.PageShown``).
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.message import Message
from textual.containers import Vertical
from textual.widgets import ContentSwitcher, DataTable, Input

from grpo_tui.protocol.schema import StoreError
from grpo_tui.tui.db import GenFilter, ReadStore, Run
from grpo_tui.tui.db import queries as q
from grpo_tui.tui.widgets.database_crumbs import DatabaseCrumbs
from grpo_tui.tui.widgets.database_filter_bar import DatabaseFilterBar
from grpo_tui.tui.widgets.database_generations_pane import DatabaseGenerationsPane
from grpo_tui.tui.widgets.database_reader import DatabaseReader
from grpo_tui.tui.widgets.database_runs_table import DatabaseRunsTable
from grpo_tui.tui.widgets.database_status import DatabaseStatus
from grpo_tui.tui.widgets.database_steps_table import DatabaseStepsTable
from grpo_tui.tui.widgets.database_table import DatabaseTable

LEVELS = ("runs", "steps", "generations")
TABLES = {"runs": "db-runs", "steps": "db-steps", "generations": "db-gens"}  # each level's table, by id


class ExportRequested(Message, namespace="database_view"):
    """``e``: export the generations that ``filter`` shows (the host pushes the dialog)."""

    def __init__(self, view: DatabaseView, store_path: str, filter: GenFilter, default_name: str) -> None:
        super().__init__()
        self.view, self.store_path, self.filter, self.default_name = view, store_path, filter, default_name


class CompareRequested(Message, namespace="database_view"):
    """``c``: compare the store's runs, ``first_run`` preselected (the host pushes the screen)."""

    def __init__(self, view: DatabaseView, store: ReadStore, first_run: int | None) -> None:
        super().__init__()
        self.view, self.store, self.first_run = view, store, first_run


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
        Binding("g", "around('group')", "group"),
        Binding("h", "around('history')", "prompt history"),
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
        self.reader = DatabaseReader(self, on_error=self._failed)
        self.generations = DatabaseGenerationsPane(self.reader, id="db-gens-pane")
        self.level = "runs"
        self.run_row: Run | None = None
        self.filter = GenFilter()
        self.before_group: GenFilter | None = None
        self.last_refresh = 0.0
        self._connect_when_shown = False  # set_store while hidden: connect on the first showing
        self._ignored = ""  # what the filter form could not read: said until the form is read again
        self._wanted: GenFilter | None = None  # ``open_filtered``'s, until its run is read

    def compose(self) -> ComposeResult:
        yield DatabaseCrumbs(id="db-crumbs")
        yield DatabaseFilterBar(id="db-filter")
        with ContentSwitcher(initial="db-runs"):
            yield DatabaseRunsTable(id="db-runs")
            yield DatabaseStepsTable(id="db-steps")
            yield self.generations
        yield DatabaseStatus(id="db-status")

    def on_mount(self) -> None:
        self._connect()
        self.set_interval(self.refresh_seconds, self._tick)

    def on_unmount(self) -> None:
        self.reader.close()

    # ------------------------------------------------------------------ store and level

    def set_store(self, db_path: str, run_id: int | None = None) -> None:
        """Browse another store, or the same one at another run; the same store and run again is a no-op."""
        if self.reader.store is not None and (db_path, run_id) == (self.db_path, self.initial_run_id):
            return
        if db_path != self.db_path:
            self.reader.close()
        self.db_path, self.initial_run_id = db_path, run_id
        if self.is_on_screen:
            self._connect()
        else:  # a hidden tab reads nothing: the store is opened when the tab is first shown
            self._connect_when_shown = True
            self._crumbs()

    def _connect(self) -> None:
        self._crumbs()
        if self.reader.store is None:
            if not self.db_path:
                self._status("No run store yet: it appears once the worker has started.")
                return
            try:
                self.reader.open(self.db_path)
            except StoreError as exc:
                self._status(str(exc), error=True)
                return
        self.reader.query(q.runs, then=self._first_runs)

    def _first_runs(self, runs: list[Run]) -> None:
        self.query_one(DatabaseRunsTable).show_keeping(runs)
        wanted = self.initial_run_id if self.initial_run_id is not None else (runs[0].id if len(runs) == 1 else None)
        run = next((r for r in runs if r.id == wanted), None)
        if run is not None:
            self.open_run(run)
            if self._wanted is not None and self._wanted.run_id == run.id:
                evidence, self._wanted = self._wanted, None
                self.open_generations(evidence)
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
        self.query_one(DatabaseCrumbs).show(self.db_path, self.run_row, self.level,
                                            grouped=self.filter.prompt_index is not None)

    def _status(self, message: str | None = None, error: bool = False) -> None:
        """The bottom line: a message, or where we are in the pages plus key hints."""
        status = self.query_one(DatabaseStatus)
        if message is not None:
            status.show_message(message, error)
        elif self.level == "generations":  # what the filter form could not read stays said over the page
            status.show_hints(self.level, self.generations.position(), ignored=self._ignored)
        else:
            status.show_hints(self.level)

    def _failed(self, message: str) -> None:
        self._status(message, error=True)

    # ------------------------------------------------------------------ navigation

    def open_run(self, run: Run) -> None:
        self.run_row = run
        self.filter = GenFilter(run_id=run.id, sort=self.filter.sort, descending=self.filter.descending)
        self.before_group = None
        self._set_level("steps")
        self.reader.query(q.steps, run.id, then=self.query_one(DatabaseStepsTable).show_keeping, group="db-steps")

    def open_generations(self, f: GenFilter) -> None:
        """Show the first page of ``f`` (replacing the current filter)."""
        self.filter, self._ignored = f, ""
        self.query_one(DatabaseFilterBar).show(f)
        if self.level != "generations":
            self._set_level("generations")
        self._crumbs()
        self.generations.open(f)

    def open_filtered(self, f: GenFilter) -> None:
        """The generations of ``f`` in its run (the Doctor tab's evidence): now, or once the run is read."""
        if self.run_row is not None and self.run_row.id == f.run_id:
            self.before_group = None
            self.open_generations(replace(f, sort=self.filter.sort, descending=self.filter.descending))
            return
        self._wanted = f
        if self.reader.store is not None:  # another run is open: read the runs again, then open f's
            self.initial_run_id = f.run_id
            self.reader.query(q.runs, then=self._first_runs)

    @on(DatabaseTable.Chosen, "#db-runs")
    def _run_chosen(self, event: DatabaseTable.Chosen) -> None:
        self.open_run(event.row)

    @on(DatabaseTable.Chosen, "#db-steps")
    def _step_chosen(self, event: DatabaseTable.Chosen) -> None:
        self.before_group = None
        step = event.row["step"]
        self.open_generations(replace(self.filter.cleared(), step_min=step, step_max=step))

    @on(DatabaseGenerationsPane.PageShown)
    def _page_shown(self, event: DatabaseGenerationsPane.PageShown) -> None:
        event.stop()
        if self.level == "generations":
            self._status()

    @on(DatabaseFilterBar.Changed)
    def _filter_changed(self, event: DatabaseFilterBar.Changed) -> None:
        self.open_generations(replace(event.filter, run_id=self.filter.run_id))
        self._ignored = f"ignored (not a number): {', '.join(event.errors)}" if event.errors else ""
        if event.from_search:
            self.generations.focus_rows()

    def on_data_table_header_selected(self, event: DataTable.HeaderSelected) -> None:
        event.stop()  # only the steps table sorts by header (it handles that itself)

    # ------------------------------------------------------------------ actions

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Only the keys that do something at this level show in the footer."""
        if action in ("clear_filter", "sort", "next_page", "previous_page", "around", "export"):
            return self.level == "generations"
        if action in ("search", "filters", "all_generations"):
            return self.run_row is not None
        if action == "back":
            return self.level != "runs"
        return True

    def action_back(self) -> None:
        focused = self.app.focused
        if self.level == "generations" and self.generations.reading:
            self.generations.close_detail()
        elif focused is not None and self.query_one(DatabaseFilterBar) in focused.ancestors_with_self:
            self.generations.focus_rows()
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
        if self.level == "generations":
            self.generations.next_page()

    def action_previous_page(self) -> None:
        if self.level == "generations":
            self.generations.previous_page()

    def action_around(self, kind: str) -> None:
        """g: the highlighted generation's group; p: every visit of its prompt (the curriculum's), oldest first."""
        row, opened = self.generations.selected, self.filter.prompt_index if kind == "group" else self.filter.history
        if self.level == "generations" and row is not None and opened is None:
            self.before_group = self.filter
            self.open_generations(q.group_filter(row) if kind == "group" else q.history_filter(row))

    def action_export(self) -> None:
        if self.level != "generations" or self.reader.store is None:
            return
        name = "".join(ch if ch.isalnum() or ch in "-_" else "-" for ch in (self.run_row.name if self.run_row else "run"))
        default = f"{name}-generations-{time.strftime('%Y%m%d-%H%M%S')}.jsonl"
        self.post_message(ExportRequested(self, self.reader.store.path, self.filter, default))

    def action_compare(self) -> None:
        if self.reader.store is None:
            return
        first = self.run_row.id if self.run_row and self.level != "runs" else None
        if first is None and (selected := self.query_one(DatabaseRunsTable).selected) is not None:
            first = selected.id
        self.post_message(CompareRequested(self, self.reader.store, first))

    def action_reload(self) -> None:
        """Re-read what is on screen (the store may have grown), keeping the cursor where it is."""
        self.last_refresh = time.monotonic()
        if self.reader.store is None:
            self._connect()
            return
        self.reader.query(q.runs, then=self._refresh_runs, group="db-runs")
        if self.level == "steps" and self.run_row is not None:
            self.reader.query(q.steps, self.run_row.id, then=self.query_one(DatabaseStepsTable).show_keeping,
                              group="db-steps")
        elif self.level == "generations":
            self.generations.reload()

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
        elif self.reader.store is not None and time.monotonic() - self.last_refresh > 2.0:
            self.action_reload()

    def _tick(self) -> None:
        # Live refresh only while someone can see us, and not while a detail is being read.
        if self.is_on_screen and self._connect_when_shown:
            self.on_show()
        elif self.is_on_screen and not self.generations.reading:
            self.action_reload()
