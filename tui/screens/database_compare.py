"""Compare runs: the reward and loss curves of two runs overlaid, from this store or another one."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.screen import Screen
from textual.widgets import Footer, Input, Select, Static

from grpo_tui.protocol.schema import StoreError
from grpo_tui.tui.db import ReadStore, Run
from grpo_tui.tui.db import queries as q
from grpo_tui.tui.inert_text import clean
from grpo_tui.tui.widgets.database_compare_chart import DatabaseCompareChart

Choice = tuple[str, int]  # (store path, run id)


class DatabaseCompareScreen(Screen):
    """Pick run A and run B (B may come from another store); both charts follow the choice."""

    BINDINGS = [Binding("escape", "app.pop_screen", "back")]
    DEFAULT_CSS = """
    DatabaseCompareScreen #db-compare-pickers { height: auto; }
    DatabaseCompareScreen #db-compare-pickers Select { width: 1fr; }
    DatabaseCompareScreen #db-compare-other { width: 1fr; }
    DatabaseCompareScreen #db-compare-message { height: auto; padding: 0 1; }
    """

    def __init__(self, store: ReadStore, first: int | None = None, second: int | None = None) -> None:
        super().__init__()
        self.stores: dict[str, ReadStore] = {store.path: store}
        self.own = store.path
        self.first, self.second = first, second
        self.options: list[tuple[Text, Choice]] = []

    def compose(self) -> ComposeResult:
        yield Static(Text("Compare runs: reward and loss per step", style="bold"), id="db-compare-title")
        with Horizontal(id="db-compare-pickers"):
            yield Select([], prompt="run A", id="db-compare-a", allow_blank=True)
            yield Select([], prompt="run B", id="db-compare-b", allow_blank=True)
            yield Input(placeholder="another store for run B: path/to/outputs.db + enter", id="db-compare-other")
        yield Static(id="db-compare-message")
        yield DatabaseCompareChart(id="db-compare-chart")
        yield Footer()

    def on_mount(self) -> None:
        runs = self.stores[self.own].run(q.runs)
        self._add_options(self.own, runs, prefix="")
        ids = [r.id for r in runs]
        first = self.first if self.first in ids else (ids[0] if ids else None)
        second = self.second if self.second in ids and self.second != first else next(
            (i for i in ids if i != first), None)
        with self.prevent(Select.Changed):
            if first is not None:
                self.query_one("#db-compare-a", Select).value = (self.own, first)
            if second is not None:
                self.query_one("#db-compare-b", Select).value = (self.own, second)
        self.redraw()

    def _add_options(self, path: str, runs: list[Run], prefix: str) -> None:
        self.options += [(Text(f"{prefix}{clean(r.name, single_line=True)} (#{r.id}, {r.steps} steps)"),
                          (path, r.id)) for r in runs]
        for sid in ("#db-compare-a", "#db-compare-b"):
            select = self.query_one(sid, Select)
            value = select.value
            with self.prevent(Select.Changed):
                select.set_options(self.options)
                if value is not Select.NULL:
                    select.value = value

    def open_other(self, path: str) -> None:
        """Add the runs of another store to the choices and pick its newest run as B."""
        message = self.query_one("#db-compare-message", Static)
        try:
            store = self.stores.get(path) or ReadStore(path)
        except StoreError as exc:
            message.update(Text(str(exc), style="bold red"))
            return
        self.stores[path] = store
        runs = store.run(q.runs)
        self._add_options(path, runs, prefix=f"{path.rsplit('/', 1)[-1]} › ")
        message.update(Text(f"added {len(runs)} run(s) from {clean(path, single_line=True)}", style="green"))
        if runs:
            self.query_one("#db-compare-b", Select).value = (path, runs[0].id)

    def redraw(self) -> None:
        series = []
        for sid in ("#db-compare-a", "#db-compare-b"):
            value = self.query_one(sid, Select).value
            if not isinstance(value, tuple):  # nothing chosen
                continue
            path, run_id = value
            label = next((str(t) for t, v in self.options if v == value), str(run_id))
            series.append((label, self.stores[path].run(q.curve, run_id)))
        self.query_one(DatabaseCompareChart).show(series)

    def on_select_changed(self, event: Select.Changed) -> None:
        event.stop()
        self.redraw()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        if event.value.strip():
            self.open_other(event.value.strip())

    def on_unmount(self) -> None:
        for path, store in self.stores.items():
            if path != self.own:
                store.close()
