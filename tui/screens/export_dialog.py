"""Export the current filter to JSONL or CSV: asks for a path, shows progress, can be cancelled."""

from __future__ import annotations

import threading
from pathlib import Path

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, ProgressBar, Select, Static

from grpo_tui.protocol.schema import StoreError
from grpo_tui.tui.db import GenFilter, open_readonly
from grpo_tui.tui.db.export import ExportCancelled, export, format_for


class ExportDialog(ModalScreen[int | None]):
    """Dismissed with the number of rows written, or None when cancelled."""

    BINDINGS = [Binding("escape", "cancel", "cancel")]
    DEFAULT_CSS = """
    ExportDialog { align: center middle; }
    ExportDialog #export-box { width: 80; max-width: 100%; height: auto; border: thick $accent; padding: 1 2;
                                background: $surface; }
    ExportDialog #export-row { height: auto; }
    ExportDialog #export-path { width: 1fr; }
    ExportDialog #export-format { width: 16; }
    ExportDialog ProgressBar { display: none; }
    ExportDialog.running ProgressBar { display: block; }
    ExportDialog #export-buttons { height: auto; align-horizontal: right; }
    ExportDialog #export-message { height: auto; }
    """

    def __init__(self, db_path: str, filter: GenFilter, default_path: str) -> None:
        super().__init__()
        self.db_path, self.filter, self.default_path = db_path, filter, default_path
        self._cancel = threading.Event()
        self._confirmed_overwrite: str | None = None

    def compose(self) -> ComposeResult:
        with Vertical(id="export-box"):
            yield Static(Text.assemble(("Export generations\n", "bold"), (self.filter.describe(), "dim")))
            with Horizontal(id="export-row"):
                yield Input(self.default_path, placeholder="file path", id="export-path")
                yield Select([("JSONL", "jsonl"), ("CSV", "csv")], value=format_for(self.default_path),
                             allow_blank=False, id="export-format")
            yield ProgressBar(id="export-progress", show_eta=True)
            yield Static(id="export-message")
            with Horizontal(id="export-buttons"):
                yield Button("Export", variant="primary", id="export-go")
                yield Button("Cancel", id="export-cancel")

    def on_mount(self) -> None:
        self.query_one("#export-path", Input).focus()

    def on_select_changed(self, event: Select.Changed) -> None:
        """Switching the format switches the file extension too."""
        path_input = self.query_one("#export-path", Input)
        stem = path_input.value.rsplit(".", 1)[0] if "." in Path(path_input.value).name else path_input.value
        path_input.value = f"{stem}.{event.value}"

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.start()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        if event.button.id == "export-go":
            self.start()
        else:
            self.action_cancel()

    def _say(self, text: str, style: str = "") -> None:
        self.query_one("#export-message", Static).update(Text(text, style=style))

    def start(self) -> None:
        if self.has_class("running"):
            return
        path = self.query_one("#export-path", Input).value.strip()
        if not path:
            self._say("Type a file path.", "bold red")
            return
        target = Path(path).expanduser()
        if not target.parent.is_dir():
            self._say(f"No such folder: {target.parent}", "bold red")
            return
        if target.exists() and self._confirmed_overwrite != str(target):
            self._confirmed_overwrite = str(target)
            self._say(f"{target} exists: press Export again to overwrite it.", "yellow")
            return
        self.add_class("running")
        self.query_one("#export-go", Button).disabled = True
        self._say("Exporting…")
        self.run_export(str(target), self.query_one("#export-format", Select).value)

    @work(thread=True, exclusive=True, group="export")
    def run_export(self, path: str, fmt: str) -> None:
        # Its own connection: a long export must not hold the view's connection (or its lock).
        try:
            conn = open_readonly(self.db_path)
        except StoreError as exc:
            self.app.call_from_thread(self._finished, None, str(exc), "bold red")
            return
        try:
            n = export(conn, self.filter, path, fmt, progress=self._progress_from_thread,
                       cancelled=self._cancel.is_set)
        except ExportCancelled:
            self.app.call_from_thread(self._finished, None, "Export cancelled; no file written.", "yellow")
        except (OSError, ValueError) as exc:
            self.app.call_from_thread(self._finished, None, f"Export failed: {exc}", "bold red")
        else:
            self.app.call_from_thread(self._finished, n, f"Exported {n:,} generations to {path}")
        finally:
            conn.close()

    def _progress_from_thread(self, done: int, total: int) -> None:
        self.app.call_from_thread(self.query_one(ProgressBar).update, total=total, progress=done)

    def _finished(self, rows: int | None, message: str, style: str = "") -> None:
        self.remove_class("running")
        self.query_one("#export-go", Button).disabled = False
        if rows is None:
            self._say(message, style)
            if self._cancel.is_set():
                self.dismiss(None)
            return
        self.app.notify(message, title="Export")
        self.dismiss(rows)

    def action_cancel(self) -> None:
        if self.has_class("running"):
            self._cancel.set()
            self._say("Cancelling…")
        else:
            self.dismiss(None)
