"""The Database view's top line: where the user is, "outputs.db › run #3 running › generations"."""

from __future__ import annotations

from pathlib import Path

from rich.text import Text
from textual.widgets import Static

from grpo_tui.tui.db import Run
from grpo_tui.tui.inert_text import clean


class DatabaseCrumbs(Static):
    """The store, the run open (below the runs level) and the level."""

    def show(self, db_path: str | None, run: Run | None, level: str, grouped: bool) -> None:
        parts = [Text(Path(db_path or "no store").name, style="bold")]
        if run and level != "runs":
            parts.append(Text.assemble(clean(run.name, single_line=True), (f" #{run.id}", "dim"),
                                       (f" {run.status}", "italic")))
        if level == "generations":
            parts.append(Text("group" if grouped else "generations"))
        elif level == "steps":
            parts.append(Text("steps"))
        self.update(Text(" › ").join(parts))
