"""An agent completion in the dashboard: the sample detail and the Database tab's detail show the
conversation turn by turn, tool results set apart, errors marked, everything inert."""

from __future__ import annotations

import sqlite3

import msgspec
from textual.app import App

from grpo_tui.protocol import messages as m
from grpo_tui.protocol.schema import migrate
from grpo_tui.tui.db.filters import GenFilter
from grpo_tui.tui.db.queries import generation, iter_generations
from grpo_tui.tui.screens.sample_detail import SampleDetailScreen
from grpo_tui.tui.widgets.database_generation_detail import render_detail

TURNS = [
    m.Turn(role="assistant", content='<tool_call>{"name": "multiply", "arguments": {"a": 12, "b": 34}}</tool_call>'),
    m.Turn(role="tool", content="408", name="multiply", arguments={"a": 12, "b": 34}, seconds=0.002),
    m.Turn(role="assistant", content='<tool_call>{"name": "divide"}</tool_call>'),
    m.Turn(role="tool", content="Error: unknown tool 'divide' (available: multiply)", name="divide",
           arguments=None, error="unknown tool 'divide' (available: multiply)", seconds=None),
    m.Turn(role="assistant", content="<answer>408</answer> [bold]not markup[/bold]"),
]


def _plain(renderable) -> str:
    from rich.console import Console

    console = Console(width=120, record=True, color_system=None)
    console.print(renderable)
    return console.export_text()


async def test_the_sample_detail_shows_the_conversation_turn_by_turn():
    sample = m.Sample(step=1, index=0, group=0, prompt="What is 12*34?", completion="<answer>408</answer>",
                      reward=1.0, turns=TURNS)

    class Host(App[None]):
        def on_mount(self) -> None:
            self.push_screen(SampleDetailScreen(sample, [sample]))

    async with Host().run_test(size=(120, 50)) as pilot:
        await pilot.pause()
        body = pilot.app.screen.query_one("#detail-conversation")
        text = _plain(body.render())
        lines = [line.rstrip() for line in text.splitlines()]
        assert "  ⮑ tool multiply {\"a\": 12, \"b\": 34} · 0.002 s" in lines
        assert "  │ 408" in lines
        assert "  ⮑ tool divide · failed" in lines
        assert "  │ Error: unknown tool 'divide' (available: multiply)" in lines
        assert "<answer>408</answer> [bold]not markup[/bold]" in lines  # model text stays literal
        assert lines.count("assistant") == 3


def test_the_database_detail_reads_the_turns_and_an_old_store_has_none(tmp_path):
    conn = sqlite3.connect(tmp_path / "outputs.db")
    conn.row_factory = sqlite3.Row
    migrate(conn)
    conn.execute("INSERT INTO runs (name, started_at) VALUES ('agent', 0)")
    conn.execute("INSERT INTO generations (run_id, step, prompt_index, group_index, prompt, completion, "
                 "raw_completion, num_tokens, finish_reason, created_at, turns) "
                 "VALUES (1, 1, 0, 0, 'p', 'c', 'raw', 9, 'stop', 0, ?)", (msgspec.json.encode(TURNS).decode(),))
    conn.commit()
    detail = generation(conn, 1)
    assert detail is not None and detail.turns == TURNS
    text = _plain(render_detail(detail))
    assert "── conversation (2 tool calls)" in text and "  │ 408" in text and "raw completion" not in text
    exported = next(iter_generations(conn, GenFilter(run_id=1)))  # the JSONL export's row
    assert exported["turns"][1] == {"role": "tool", "content": "408", "name": "multiply",
                                    "arguments": {"a": 12, "b": 34}, "seconds": 0.002}
    conn.execute("ALTER TABLE generations DROP COLUMN turns")  # a version 2 store, read as it is
    assert generation(conn, 1).turns == []
