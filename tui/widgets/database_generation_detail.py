"""The full record of one generation: prompt, thinking, completion, tool calls with status and
error, reward breakdown. Everything model-written is shown inert."""

from __future__ import annotations

import re

from rich.console import Group
from rich.text import Text
from textual.containers import VerticalScroll
from textual.widgets import Static

from grpo_tui.tui.db import GenDetail
from grpo_tui.tui.db.search import highlight_pattern
from grpo_tui.tui.format import clock, number, signed
from grpo_tui.tui.inert_text import inert
from grpo_tui.tui.sample_text import turns_text


def _heading(title: str) -> Text:
    return Text(f"\n── {title}", style="bold cyan")


def _body(text: str | None, style: str = "", highlight: str | None = None) -> Text:
    """A block of model text: inert, search words highlighted, ending its line (``inert`` leaves ``end`` empty)."""
    block = inert(text, style)
    block.end = "\n"
    if highlight:
        block.highlight_regex(re.compile(highlight, re.IGNORECASE), "black on yellow")
    return block


def render_detail(d: GenDetail, search: str = "") -> Group:
    """The detail as one renderable, words of ``search`` highlighted (tests read what a user sees here)."""
    hl = highlight_pattern(search)
    r = d.row
    head = Text.assemble(
        ("run ", "dim"), inert(d.run_name, "bold", single_line=True), ("  step ", "dim"), (str(r.step), "bold"),
        ("  prompt ", "dim"), str(r.prompt_index), ("  completion ", "dim"), str(r.group_index),
        ("  id ", "dim"), str(r.id), ("  ", ""), (clock(d.created_at), "dim"), "\n",
        ("reward ", "dim"), (number(r.reward), "bold"), ("  advantage ", "dim"), signed(r.advantage),
        ("  tokens ", "dim"), str(r.num_tokens), ("  finish ", "dim"),
        (r.finish_reason, "yellow" if r.finish_reason != "stop" else ""),
        ("  dropped: its group's rewards were all equal (dynamic sampling), not trained on" if d.dropped else "",
         "yellow"),
        (f"  sampled by step {d.policy_step}'s weights, {r.step - 1 - d.policy_step} behind ([async])"
         if d.policy_step is not None and d.policy_step != r.step - 1 else "", "cyan"),
    )
    parts: list = [head]
    if d.reward_details:
        parts += [_heading("reward breakdown"),
                  Text("  ".join(f"{k} = {number(v)}" for k, v in d.reward_details.items()))]
    parts += [_heading("prompt"), _body(d.prompt, highlight=hl)]
    if d.thinking:
        parts += [_heading("thinking"), _body(d.thinking, "italic", hl)]
    if d.turns:  # an agent completion, turn by turn, tool results set apart
        parts += [_heading(f"conversation ({sum(t.role == 'tool' for t in d.turns)} tool calls)"), turns_text(d.turns)]
    else:
        parts += [_heading("completion"), _body(d.completion, highlight=hl)]
    if d.tool_calls:
        parts.append(_heading(f"tool calls ({len(d.tool_calls)})"))
        for c in d.tool_calls:
            ok = c.status == "ok"
            line = Text.assemble(
                (f"#{c.call_index} ", "dim"), inert(c.name or "(no name)", "bold", single_line=True), "  ",
                (c.status, "green" if ok else "bold red"),
            )
            if c.error:
                line.append("  ")
                line.append_text(inert(c.error, "red", single_line=True))
            parts.append(line)
            if c.arguments:
                parts.append(Text.assemble(("   arguments ", "dim"), inert(c.arguments, single_line=True)))
            if c.raw and not ok:
                parts.append(Text.assemble(("   raw ", "dim"), inert(c.raw, single_line=True, limit=500)))
    if d.raw_completion and d.raw_completion != d.completion and not d.thinking and not d.turns:
        parts += [_heading("raw completion"), _body(d.raw_completion, "dim")]
    return Group(*parts)


class DatabaseGenerationDetail(VerticalScroll):
    """A scrollable pane showing one generation (or a hint when none is selected)."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.detail: GenDetail | None = None

    def compose(self):
        yield Static(Text("Select a generation to see it in full.", style="dim"), id="db-detail-body")

    def show(self, detail: GenDetail | None, message: str = "", search: str = "") -> None:
        self.detail = detail
        body = self.query_one("#db-detail-body", Static)
        if detail is None:
            body.update(Text(message or "Select a generation to see it in full.", style="dim"))
        else:
            body.update(render_detail(detail, search))
        self.scroll_home(animate=False)
