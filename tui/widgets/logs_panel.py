"""Worker logs and stderr: bounded, filtered by level, following the tail only at the bottom."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import RichLog, Static

from grpo_tui.tui.inert_text import clean
from grpo_tui.tui.state import LogEntry
from grpo_tui.tui.widgets.log_view import LogView

LEVELS = ("debug", "info", "warning", "error")
_STYLES = {"debug": "dim", "info": "", "warning": "yellow", "error": "bold red"}
MAX_ENTRIES = 5000


class LogsPanel(Vertical):
    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.entries: deque[LogEntry] = deque(maxlen=MAX_ENTRIES)
        self.min_level = "info"

    def compose(self) -> ComposeResult:
        yield Static(id="logs-title")
        yield LogView(id="logs-view", max_lines=MAX_ENTRIES, wrap=True, markup=False, highlight=False)

    def on_mount(self) -> None:
        self._title()

    def _title(self) -> None:
        text = Text(no_wrap=True)
        text.append(f"level ≥ {self.min_level}", "bold").append(" (l to change)", "dim")
        self.query_one("#logs-title", Static).update(text)

    def _visible(self, entry: LogEntry) -> bool:
        return LEVELS.index(entry.level) >= LEVELS.index(self.min_level) if entry.level in LEVELS else True

    @staticmethod
    def _line(entry: LogEntry) -> Text:
        text = Text()
        text.append(f"{entry.level[:4]:<4} ", _STYLES.get(entry.level, ""))
        if entry.source == "stderr":
            text.append("stderr ", "dim")
        text.append(clean(entry.message), _STYLES.get(entry.level, ""))
        return text

    def add(self, entries: Iterable[LogEntry]) -> None:
        view = self.query_one(RichLog)
        at_bottom = view.is_vertical_scroll_end or view.max_scroll_y == 0
        for entry in entries:
            self.entries.append(entry)
            if self._visible(entry):
                view.write(self._line(entry), scroll_end=at_bottom)

    def set_level(self, level: str) -> None:
        self.min_level = level
        self._title()
        view = self.query_one(RichLog)
        view.clear()
        for entry in self.entries:
            if self._visible(entry):
                view.write(self._line(entry), scroll_end=True)

    def cycle_level(self) -> None:
        self.set_level(LEVELS[(LEVELS.index(self.min_level) + 1) % len(LEVELS)])
