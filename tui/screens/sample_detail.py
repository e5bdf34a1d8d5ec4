"""One sample in full: prompt, thinking, completion (or an agent's conversation), tool calls, reward breakdown, advantage."""

from __future__ import annotations


from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Static

from grpo_tui.protocol import messages as m
from grpo_tui.tui.inert_text import inert
from grpo_tui.tui.sample_text import summary, tool_calls_text, turns_text
from grpo_tui.tui.screens.group_view import GroupScreen
from grpo_tui.tui.widgets.key_bar import KeyBar


class SampleDetailScreen(Screen[None]):
    BINDINGS = [
        Binding("escape,q", "app.pop_screen", "back"),
        Binding("g", "group", "group view"),
    ]

    def __init__(self, sample: m.Sample, group: list[m.Sample], group_size: int | None = None) -> None:
        super().__init__()
        self.sample, self.group, self.group_size = sample, group, group_size

    def compose(self) -> ComposeResult:
        s = self.sample
        with VerticalScroll(id="detail"):
            yield Static(summary(s), id="detail-summary")
            for title, body in (
                ("prompt", inert(s.prompt)),
                ("thinking", inert(s.thinking) if s.thinking else Text("(none)", "dim")),
                # an agent completion is shown turn by turn, tool results set apart
                ("conversation", turns_text(s.turns)) if s.turns else ("completion", inert(s.completion)),
                ("tool calls", tool_calls_text(s.tool_calls) if s.tool_calls else Text("(none)", "dim")),
            ):
                yield Static(Text(title, "bold underline"), classes="section-title")
                yield Static(body, classes="section-body", id=f"detail-{title.replace(' ', '-')}")
        yield KeyBar()

    def action_group(self) -> None:
        self.app.push_screen(GroupScreen(self.group, self.group_size))
