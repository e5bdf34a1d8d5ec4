"""``C``: pick the runs whose charts are drawn over this run's (docs/steering.md, "Compare runs"): its
parent and forks first, then the other runs beside it. ``space`` ticks a run, ``enter`` applies,
``esc`` cancels. Dismissed with the folders ticked, or None."""

from __future__ import annotations

from pathlib import Path

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import SelectionList, Static
from textual.widgets.selection_list import Selection

from grpo_tui.tui.compared_runs import MAX_COMPARED
from grpo_tui.tui.widgets.tick_list import TickList


class ComparePickerScreen(ModalScreen[list[Path] | None]):
    """``rows``: (folder, what the list shows of it); ``ticked``: the folders compared now."""

    BINDINGS = [Binding("escape", "cancel", "cancel"), Binding("enter", "apply", "apply", priority=True)]
    DEFAULT_CSS = """
    ComparePickerScreen { align: center middle; }
    ComparePickerScreen #compare-box { width: 96; max-width: 100%; height: auto; max-height: 90%;
                                       border: thick $accent; padding: 0 1; background: $surface; }
    ComparePickerScreen SelectionList { height: auto; max-height: 20; }
    """

    def __init__(self, rows: list[tuple[Path, str]], ticked: list[Path]) -> None:
        super().__init__()
        self.rows, self.ticked = rows, ticked

    def compose(self) -> ComposeResult:
        with Vertical(id="compare-box"):
            yield Static(Text.assemble(("Compare runs", "bold"), (f"  up to {MAX_COMPARED}, drawn over this run's "
                                                                   "charts in their own colours", "dim")))
            if self.rows:
                yield TickList(*(Selection(Text(label), i, folder in self.ticked)
                                           for i, (folder, label) in enumerate(self.rows)), id="compare-runs")
            else:
                yield Static(Text("No other run beside this one (attach's --compare takes runs from any folder: "
                                  "docs/steering.md).", "dim"))
            yield Static(Text("space ticks a run · enter applies · esc cancels", "dim"))

    def on_mount(self) -> None:
        for runs in self.query("#compare-runs").results(SelectionList):
            runs.focus()
            runs.highlighted = 0

    def action_apply(self) -> None:
        chosen = [self.rows[i][0] for runs in self.query("#compare-runs").results(SelectionList) for i in runs.selected]
        if not chosen and not self.ticked:  # nothing to draw and nothing to take away: say how to tick
            what = "space ticks a run, then enter" if self.rows else "no other run to compare"
            self.app.notify(f"nothing ticked: {what} (esc closes)", severity="warning", markup=False)
            return
        self.dismiss(chosen[:MAX_COMPARED])

    def action_cancel(self) -> None:
        self.dismiss(None)
