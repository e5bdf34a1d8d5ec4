"""One page of generations: step, prompt, completion index, reward, advantage, tokens, finish
reason, tool calls, thinking and the first line of the completion."""

from __future__ import annotations

from rich.text import Text
from textual.message import Message
from textual.widgets import DataTable

from grpo_tui.tui.db import GenRow
from grpo_tui.tui.db.format import tools
from grpo_tui.tui.format import number, signed
from grpo_tui.tui.inert import inert
from grpo_tui.tui.status_style import status_style

COMPLETION_CHARS = 60


class DatabaseGenerationsTable(DataTable):
    """The current page; moving the cursor announces the row so the detail pane can follow."""

    class Highlighted(Message):
        def __init__(self, row: GenRow | None) -> None:
            super().__init__()
            self.row = row

    class Chosen(Message):
        """Enter on a row."""

        def __init__(self, row: GenRow) -> None:
            super().__init__()
            self.row = row

    def __init__(self, **kwargs) -> None:
        super().__init__(cursor_type="row", zebra_stripes=True, **kwargs)
        self.rows_data: list[GenRow] = []

    def on_mount(self) -> None:
        # The completion's first line comes early (cut short) so narrow tabs still show it.
        for label in ("step", "prompt", "#", "reward", "adv", "completion", "finish", "tokens", "tools", "think"):
            self.add_column(label, key=label)

    def show(self, rows: list[GenRow], keep_id: int | None = None) -> None:
        """Replace the rows; the cursor goes to ``keep_id`` if it is on this page, else to the top."""
        self.rows_data = rows
        self.clear()
        for r in rows:
            statuses = tools(r.tool_statuses)
            self.add_row(
                str(r.step), str(r.prompt_index), str(r.group_index), number(r.reward), signed(r.advantage),
                inert(r.first_line, single_line=True, limit=COMPLETION_CHARS),
                Text(r.finish_reason, style=status_style(r.finish_reason)), str(r.num_tokens),
                Text(statuses, style="red" if any(s != "ok" for s in r.tool_statuses) else "green"),
                "✓" if r.has_thinking else "", key=str(r.id),
            )
        ids = [r.id for r in rows]
        self.move_cursor(row=ids.index(keep_id) if keep_id in ids else 0, animate=False)
        self.post_message(self.Highlighted(self.selected))

    @property
    def selected(self) -> GenRow | None:
        if not self.rows_data or not (0 <= self.cursor_row < len(self.rows_data)):
            return None
        return self.rows_data[self.cursor_row]

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        event.stop()
        self.post_message(self.Highlighted(self.selected))

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        if self.selected:
            self.post_message(self.Chosen(self.selected))
