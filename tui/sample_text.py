"""A sample as rich text: the one-line summary and the tool calls (the sample detail and the group
view both show them)."""

from __future__ import annotations

import json

from rich.text import Text

from grpo_tui.protocol import messages as m
from grpo_tui.tui.format import number
from grpo_tui.tui.inert_text import clean, inert


def summary(s: m.Sample) -> Text:
    text = Text()
    text.append(f"step {s.step} · group {s.group} · sample {s.index}", "bold")
    text.append(f"\nreward {number(s.reward)} · advantage {number(s.advantage)}")
    text.append(f" · {s.num_tokens} tokens · finish {s.finish_reason}")
    if s.reward_details:
        text.append("\nreward breakdown: ", "dim")
        text.append(" · ".join(f"{k} {number(v)}" for k, v in s.reward_details.items()))
    for label, note in s.reward_notes.items():  # what a reward noted (log_extra, e.g. schema errors): inert
        text.append(f"\n{label}: ", "dim").append_text(inert(note))
    return text


def tool_calls_text(calls: list[m.ToolCall]) -> Text:
    text = Text()
    for c in calls:
        style = "green" if c.status == "ok" else "bold red"
        text.append(f"#{c.index} {c.status}", style).append(" ")
        text.append_text(inert(c.name or "(no name)", "bold"))
        if c.arguments is not None:
            text.append(" ").append_text(inert(json.dumps(c.arguments, ensure_ascii=False)))
        if c.error:
            text.append(" — ").append_text(inert(c.error, "red"))
        text.append("\n")
    return text


def turns_text(turns: list[m.Turn]) -> Text:
    """An agent completion turn by turn: the model's turns as written, each tool result set apart
    (indented under a ``⮑ tool`` line with its arguments and time; an error in red)."""
    text = Text()
    for i, t in enumerate(turns):
        if i:
            text.append("\n")
        if t.role == "assistant":
            text.append("assistant\n", "bold")
            text.append_text(inert(t.content))
            text.append("\n")
            continue
        if t.role == "user":  # an environment's reply (respond), masked from the loss
            text.append("environment\n", "bold magenta").append_text(inert(t.content, "magenta"))
            text.append("\n")
            continue
        text.append("  ⮑ tool ", "bold cyan").append_text(inert(t.name or "(no name)", "bold cyan", single_line=True))
        if t.arguments is not None:
            text.append(" ").append_text(inert(json.dumps(t.arguments, ensure_ascii=False), "cyan", single_line=True,
                                               limit=200))
        if t.seconds is not None:
            text.append(f" · {t.seconds:.3g} s", "dim")
        text.append(" · failed" if t.error is not None else "", "bold red")
        text.append(" · not read: no room left in the completion\n" if t.unread else "\n", "dim")
        for line in clean(t.content).split("\n"):
            text.append("  │ ", "cyan").append_text(inert(line, "red" if t.error is not None else "cyan"))
            text.append("\n")
    return text
