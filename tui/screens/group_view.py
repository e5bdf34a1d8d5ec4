"""The G completions of one prompt side by side, so you can see why they got different rewards."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.screen import Screen
from textual.widgets import Static

from grpo_tui.protocol import messages as m
from grpo_tui.tui.inert_text import inert
from grpo_tui.tui.sample_text import summary
from grpo_tui.tui.widgets.key_bar import KeyBar


class GroupScreen(Screen[None]):
    BINDINGS = [Binding("escape,q", "app.pop_screen", "back")]

    def __init__(self, samples: list[m.Sample], group_size: int | None = None) -> None:
        super().__init__()
        self.samples, self.group_size = samples, group_size

    def compose(self) -> ComposeResult:
        first = self.samples[0] if self.samples else None
        head = Text()
        if first:
            head.append(f"group {first.group} of step {first.step} · {len(self.samples)} completions shown", "bold")
            if self.group_size and len(self.samples) < self.group_size:
                # m works only while the run trains: a finished run's groups stay as they were sent
                live = self.app.check_action("cycle_display", ())
                how = "; m → all shows whole groups" if live else ""
                head.append(f" of {self.group_size} (the sample display sent a subset{how})", "dim")
            head.append("\n")
            head.append_text(inert(first.prompt))
        yield Static(head, id="group-prompt")
        with Horizontal(id="group-columns"):
            for s in self.samples:
                with VerticalScroll(classes="group-column"):
                    yield Static(summary(s))
                    yield Static(inert(s.completion), classes="section-body")
        yield KeyBar()
