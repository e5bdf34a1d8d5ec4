"""The latest step's samples, one row each; enter opens one, g opens its group side by side."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.message import Message
from textual.widgets import DataTable, Static

from grpo_tui.protocol import messages as m
from grpo_tui.tui.inert import inert
from grpo_tui.tui.format import format_number

PREVIEW_CHARS = 200  # a row shows the head of a completion; the detail screen shows all of it
# Fixed widths: auto-sized columns would depend on which rows happened to pass through the table.
COLUMNS = (("grp", 3), ("#", 3), ("reward", 7), ("adv", 7), ("finish", 10), ("tok", 5), ("completion", PREVIEW_CHARS))


class SamplesPanel(Vertical):
    BINDINGS = [Binding("g", "open_group", "group view")]

    class Open(Message):
        """The user asked for one sample's detail (``group=False``) or its whole group."""

        def __init__(self, sample: m.Sample, group: bool) -> None:
            super().__init__()
            self.sample, self.group = sample, group

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.samples: list[m.Sample] = []

    def compose(self) -> ComposeResult:
        yield Static(Text("no samples yet", "dim"), id="samples-title")
        table: DataTable[object] = DataTable(id="samples-table", cursor_type="row", zebra_stripes=True)
        for label, width in COLUMNS:
            table.add_column(label, width=width)
        yield table

    def show(self, samples: list[m.Sample], mode: str) -> None:
        self.samples = list(samples)
        step = samples[0].step if samples else None
        title = Text(no_wrap=True)
        title.append(f"step {step} · " if step is not None else "", "bold")
        title.append(f"display {mode} (m to change) · {len(samples)} samples · enter: detail · g: group", "dim")
        self.query_one("#samples-title", Static).update(title)
        table = self.query_one(DataTable)
        row = table.cursor_row
        table.clear()
        for s in samples:
            finish = Text(s.finish_reason, "yellow" if s.finish_reason != "stop" else "")
            table.add_row(
                str(s.group), str(s.index), format_number(s.reward), format_number(s.advantage), finish,
                str(s.num_tokens), inert(s.completion, single_line=True, limit=PREVIEW_CHARS),
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
