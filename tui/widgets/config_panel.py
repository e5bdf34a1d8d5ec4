"""The run's config as it trains (the worker's, with the live changes since), the history of those
changes, and the run's checkpoints on disk; ``f`` on a checkpoint asks to fork the run from it
(the dashboard screen asks for the changes and makes the fork: docs/steering.md, "Fork a run")."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.message import Message
from textual.widgets import DataTable, Static

from grpo_tui.common.live_settings import toml_value
from grpo_tui.common.tomlout import dumps
from grpo_tui.protocol import messages as m
from grpo_tui.tui.checkpoint_list import CheckpointInfo
from grpo_tui.tui.format import MISSING, human_size
from grpo_tui.tui.inert_text import inert


class ConfigPanel(VerticalScroll):
    BINDINGS = [Binding("f", "fork", "fork from this checkpoint")]

    class Fork(Message):
        """``f`` on a checkpoint: fork the run from it."""

        def __init__(self, checkpoint: CheckpointInfo) -> None:
            super().__init__()
            self.checkpoint = checkpoint

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.checkpoints: list[CheckpointInfo] = []  # the table's rows, in order

    def compose(self) -> ComposeResult:
        yield Static(Text("checkpoints", "bold"))
        table: DataTable[object] = DataTable(id="checkpoints-table", cursor_type="row")
        table.add_columns("step", "kind", "size", "parameters", "dtype", "path")
        yield table
        yield Static(Text("live changes", "bold"), classes="section-title", id="changes-title")
        yield Static(id="changes-text")
        yield Static(Text("resolved config", "bold"), classes="section-title")
        yield Static(Text("waiting for the worker's init…", "dim"), id="config-text")

    def show_config(self, config: dict[str, Any]) -> None:
        try:
            text = dumps(config)
        except (TypeError, ValueError):
            text = repr(config)
        self.query_one("#config-text", Static).update(inert(text))

    def on_mount(self) -> None:
        self.show_changes([])

    def show_changes(self, changes: list[m.SettingChanged]) -> None:
        """The live changes in the order they apply (docs/steering.md); the section is hidden without any."""
        text = Text()
        for c in changes:
            text.append(f"from step {c.step}: ", "dim").append(c.key, "bold")
            text.append(f"  {toml_value(c.old)} → {toml_value(c.new)}").append(f"  ({c.source})\n", "dim")
        self.query_one("#changes-text", Static).update(text)
        for part in ("#changes-title", "#changes-text"):
            self.query_one(part).display = bool(changes)

    def action_fork(self) -> None:
        table = self.query_one("#checkpoints-table", DataTable)
        if self.checkpoints and 0 <= table.cursor_row < len(self.checkpoints):
            chosen = self.checkpoints[table.cursor_row]
            if chosen.step is not None:
                self.post_message(self.Fork(chosen))
                return
        self.notify("no checkpoint to fork from here yet (s saves one)", timeout=4)

    def show_checkpoints(self, infos: list[CheckpointInfo]) -> None:
        self.checkpoints = list(infos)
        table = self.query_one("#checkpoints-table", DataTable)
        table.clear()
        for i in infos:
            table.add_row(
                MISSING if i.step is None else str(i.step), i.kind, human_size(i.size_bytes),
                f"{i.parameters:,}", ", ".join(i.dtypes) or MISSING, inert(str(i.path), single_line=True),
            )
