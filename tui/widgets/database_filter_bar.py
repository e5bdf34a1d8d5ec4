"""The generations filter: a search box, a one-line summary of the current filter, and a form
(``f``) for step range, reward range, prompt, tool name, finish reason, tool-call status, thinking and
dynamic sampling's dropped groups and the curriculum's prompt states."""

from __future__ import annotations

from typing import Literal
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.widgets import Button, Input, Label, Select, Static

from grpo_tui.tui.db import GenFilter
from grpo_tui.tui.db.filters import FINISH_REASONS, PROMPT_STATES, SAMPLING_FILTERS, TOOL_FILTERS, from_form

NumberKind = Literal["integer", "number"]
NUMBER_FIELDS: tuple[tuple[str, str, NumberKind], ...] = (("step_min", "from", "integer"), ("step_max", "to", "integer"),
                 ("reward_min", "min", "number"), ("reward_max", "max", "number"),
                 ("prompt_index", "prompt #", "integer"))
THINKING = {"yes": True, "no": False}
DROPPED = {"dropped": True, "trained": False}


class DatabaseFilterBar(Vertical):
    """Posts ``Changed`` with the whole new filter whenever the user applies a change."""

    class Changed(Message):
        def __init__(self, filter: GenFilter, errors: list[str], from_search: bool = False) -> None:
            super().__init__()
            self.filter = filter
            self.errors = errors
            self.from_search = from_search  # the search box: results are what the user looks at next

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.filter = GenFilter()

    def compose(self) -> ComposeResult:
        yield Input(placeholder="/ search prompt, completion, thinking as typed (fts: a OR b, pre* for operators) + enter",
                    id="db-search")
        yield Static(id="db-filter-summary")
        with Vertical(id="db-filter-form"):
            with Horizontal(classes="db-filter-row"):
                yield Label("steps")
                yield from (self._number(n, p, t) for n, p, t in NUMBER_FIELDS[:2])
                yield Label("reward")
                yield from (self._number(n, p, t) for n, p, t in NUMBER_FIELDS[2:4])
                yield self._number(*NUMBER_FIELDS[4])
                yield Input(placeholder="tool name", id="f-tool_name", classes="db-tool-name")
            with Horizontal(classes="db-filter-row"):
                yield Select([(r, r) for r in FINISH_REASONS], prompt="finish: any", id="f-finish_reason")
                yield Select([(label, key) for key, label in TOOL_FILTERS.items()], prompt="tools: any",
                             id="f-tool_status")
                yield Select([("with thinking", "yes"), ("without thinking", "no")], prompt="thinking: any",
                             id="f-has_thinking")
                yield Select([(label, key) for key, label in SAMPLING_FILTERS.items()], prompt="sampling: any",
                             id="f-dropped")
                yield Select([(label, key) for key, label in PROMPT_STATES.items()], prompt="prompt state: any",
                             id="f-prompt_state")
                yield Button("Clear (x)", id="db-filter-clear", compact=True)

    @staticmethod
    def _number(name: str, placeholder: str, kind: NumberKind) -> Input:
        return Input(placeholder=placeholder, type=kind, id=f"f-{name}", classes="db-number")

    def show(self, f: GenFilter) -> None:
        """Show ``f`` in the summary and the form without announcing a change."""
        self.filter = f
        with self.prevent(Input.Changed, Select.Changed):
            self.query_one("#db-search", Input).value = f.text
            self.query_one("#f-tool_name", Input).value = f.tool_name or ""
            for name, _, _ in NUMBER_FIELDS:
                value = getattr(f, name)
                self.query_one(f"#f-{name}", Input).value = "" if value is None else f"{value:g}"
            thinking = None if f.has_thinking is None else ("yes" if f.has_thinking else "no")
            dropped = None if f.dropped is None else ("dropped" if f.dropped else "trained")
            for name, value in (("finish_reason", f.finish_reason), ("tool_status", f.tool_status),
                                ("has_thinking", thinking), ("dropped", dropped), ("prompt_state", f.prompt_state)):
                select = self.query_one(f"#f-{name}", Select)
                if value is None:
                    select.clear()
                else:
                    select.value = value
        summary = Text.assemble(("filter: ", "bold"), (f.describe(), ""),
                                ("   / search · f filters · o sort · x clear", "dim"))
        self.query_one("#db-filter-summary", Static).update(summary)

    def toggle_form(self) -> None:
        self.toggle_class("open")
        if self.has_class("open"):
            self.query_one("#f-step_min", Input).focus()

    def read_form(self) -> tuple[GenFilter, list[str]]:
        """The filter the form and search box describe now."""
        values: dict = {name: self.query_one(f"#f-{name}", Input).value for name, _, _ in NUMBER_FIELDS}
        for name in ("finish_reason", "tool_status", "has_thinking", "dropped", "prompt_state"):
            value = self.query_one(f"#f-{name}", Select).value
            values[name] = None if value is Select.NULL else value
        values["has_thinking"] = THINKING.get(values["has_thinking"])
        values["dropped"] = DROPPED.get(values["dropped"])
        values["text"] = self.query_one("#db-search", Input).value
        values["tool_name"] = self.query_one("#f-tool_name", Input).value
        return from_form(self.filter, **values)

    def _emit(self, from_search: bool = False) -> None:
        f, errors = self.read_form()
        self.post_message(self.Changed(f, errors, from_search))

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self._emit(from_search=event.input.id == "db-search")

    def on_select_changed(self, event: Select.Changed) -> None:
        event.stop()
        self._emit()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        if event.button.id == "db-filter-clear":
            self.post_message(self.Changed(self.filter.cleared(), []))
