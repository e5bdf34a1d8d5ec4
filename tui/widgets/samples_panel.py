"""The latest step's samples, one row each; enter opens one, g opens its group side by side."""

from __future__ import annotations

import time

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.message import Message
from textual.timer import Timer
from textual.widgets import DataTable, Static

from grpo_tui.protocol import messages as m
from grpo_tui.tui.format import number
from grpo_tui.tui.inert_text import inert
from grpo_tui.tui.widgets.list_table import ListTable

REDRAW_INTERVAL_S = 1.0  # one table rebuild a second at most, however fast the steps come
# A flush that comes a little early still draws: a timer for the rest would redraw the table in a
# screen update of its own, between two of the dashboard's once-a-second ones.
SLACK_S = 0.1
PREVIEW_CHARS = 200  # a row shows the head of a completion (what fits); the detail screen shows all of it
# Fixed widths: auto-sized columns would depend on which rows happened to pass through the table.
# Narrow: at 120 columns the tab is 60 wide and the completion must still show a few words.
COLUMNS = (("grp", 3), ("#", 2), ("reward", 6), ("adv", 6), ("finish", 6), ("tok", 4), ("completion", PREVIEW_CHARS))
FINISH_SHORT = {"repetition": "repeat"}


class SamplesPanel(Vertical):
    BINDINGS = [Binding("g", "open_group", "group view")]

    class Open(Message):
        """The user asked for one sample's detail (``group=False``) or its whole group."""

        def __init__(self, sample: m.Sample, group: bool) -> None:
            super().__init__()
            self.sample, self.group = sample, group

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.samples: list[m.Sample] = []  # the rows of the table, in order
        self._pending: tuple[list[m.Sample], str] | None = None
        self._drawn_at = 0.0
        self._mode = "all"
        self._timer: Timer | None = None
        self._preview = PREVIEW_CHARS  # the completion column's width: what the table has room for

    def compose(self) -> ComposeResult:
        yield Static(Text("no samples yet", "dim"), id="samples-title")
        table: DataTable[object] = ListTable(id="samples-table", cursor_type="row", zebra_stripes=True)
        for label, width in COLUMNS:
            table.add_column(label, width=width)
        with Vertical(id="samples-body"):  # the table's colours below its rows (app.tcss)
            yield table

    def show(self, samples: list[m.Sample], mode: str) -> None:
        """Show these samples: now, or (at most every ``REDRAW_INTERVAL_S``, and only while the tab
        is on screen) a moment later, so a fast run does not rebuild the table on every flush."""
        self._pending = (list(samples), mode)
        if mode != self._mode and self.is_on_screen:  # the user pressed m: answer at once
            self._draw()
            return
        if self._timer is not None:
            return
        wait = self._drawn_at + REDRAW_INTERVAL_S - time.monotonic()
        if wait <= SLACK_S and self.is_on_screen:  # the dashboard's once-a-second flush: draw with it
            self._draw()
        else:
            self._timer = self.set_timer(max(wait, 0.02), self._draw_pending)

    def on_resize(self) -> None:
        # the completion column takes the rest of the width: no cells drawn only to be cropped
        fixed = sum(width + 2 for _, width in COLUMNS[:-1]) + 2 + 2  # cell padding, its own, a scrollbar
        preview = max(20, min(PREVIEW_CHARS, self.size.width - fixed))
        if preview != self._preview:
            self._preview = preview
            table = self.query_one(DataTable)
            column = table.columns[list(table.columns)[-1]]
            column.width = preview
            self._pending = self._pending or (self.samples, self._mode)
            self._draw()  # the rows again, cut to the new width

    @property
    def up_to_date(self) -> bool:
        """False while samples wait for the next redraw."""
        return self._pending is None

    def _draw_pending(self) -> None:
        self._timer = None
        if self._pending is not None and self.is_on_screen:  # off screen: on_show draws it
            self._draw()

    def on_show(self) -> None:
        if self._pending is not None:
            self._draw()

    def _draw(self) -> None:
        assert self._pending is not None
        (samples, mode), self._pending = self._pending, None
        self._mode = mode
        self._drawn_at = time.monotonic()
        self.samples = samples
        step = samples[0].step if samples else None
        title = Text(no_wrap=True)
        title.append(f"step {step} · " if step is not None else "", "bold")
        title.append(f"display {mode} (m to change) · {len(samples)} samples · enter: detail · g: group", "dim")
        self.query_one("#samples-title", Static).update(title, layout=False)
        table = self.query_one(DataTable)
        row = table.cursor_row
        table.clear()
        for s in samples:
            finish = Text(FINISH_SHORT.get(s.finish_reason, s.finish_reason), "yellow" if s.finish_reason != "stop" else "")
            table.add_row(
                str(s.group), str(s.index), number(s.reward), number(s.advantage), finish,
                str(s.num_tokens), inert(s.completion, single_line=True, limit=self._preview),
            )
        if samples:
            table.move_cursor(row=min(row, len(samples) - 1))

    def selected(self) -> m.Sample | None:
        row = self.query_one(DataTable).cursor_row
        return self.samples[row] if 0 <= row < len(self.samples) else None

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        if sample := self.selected():
            self.post_message(self.Open(sample, group=False))

    def action_open_group(self) -> None:
        if sample := self.selected():
            self.post_message(self.Open(sample, group=True))
