"""The Database view's bottom line: the keys of the level shown (and where it is in the pages), or
a message, in the error style when something went wrong."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

HINTS = {
    "runs": "enter open run · c compare · F5 refresh",
    "steps": "enter step's generations · a all generations · o sort by column · esc back · c compare",
    "generations": "enter detail · g group · h prompt history · n/b next/prev page · / search · f filters · e export · esc back",
}


class DatabaseStatus(Static):
    """``show_hints`` for a level, ``show_message`` for anything else."""

    def show_hints(self, level: str, position: str | None = None, ignored: str = "") -> None:
        """The level's keys, after ``position`` ("page 2 · rows 51–100 of 1,234") when there is one,
        and after ``ignored`` (what the filter form could not read), in the error style, when given."""
        hints = HINTS[level] if position is None else f"{position} · {HINTS[level]}"
        self.show_message(f"{ignored} · {hints}" if ignored else hints, error=bool(ignored))

    def show_message(self, message: str, error: bool = False) -> None:
        self.set_class(error, "error")
        self.update(Text(message))
