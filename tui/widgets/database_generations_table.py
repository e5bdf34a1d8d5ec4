"""One page of generations: step, prompt, completion index, reward, advantage, tokens, finish
reason, tool calls, thinking and the first line of the completion. Moving the cursor announces
the row (``Highlighted``) so the detail pane can follow."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import RenderableType
from rich.text import Text

from grpo_tui.tui.db import GenRow
from grpo_tui.tui.db.format import tools
from grpo_tui.tui.format import number, signed
from grpo_tui.tui.inert_text import inert
from grpo_tui.tui.status_style import status_style
from grpo_tui.tui.widgets.database_table import DatabaseTable

COMPLETION_CHARS = 60


class DatabaseGenerationsTable(DatabaseTable[GenRow]):
    """The current page."""

    # The completion's first line comes early (cut short) so narrow tabs still show it.
    COLUMNS = {c: c for c in ("step", "prompt", "#", "reward", "adv", "completion", "finish", "tokens", "tools",
                              "think")}

    def key(self, row: GenRow) -> int:
        return row.id

    def cells(self, row: GenRow) -> Sequence[RenderableType]:
        failed = any(s != "ok" for s in row.tool_statuses)
        return (
            str(row.step), str(row.prompt_index), str(row.group_index), number(row.reward), signed(row.advantage),
            inert(row.first_line, single_line=True, limit=COMPLETION_CHARS),
            Text(row.finish_reason, style=status_style(row.finish_reason)), str(row.num_tokens),
            Text(tools(row.tool_statuses), style="red" if failed else "green"), "✓" if row.has_thinking else "",
        )
