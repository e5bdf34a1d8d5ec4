"""Hostile model output, shared by the scripted worker and the tests that look at the screen.

Every field a model (or a dataset) writes carries terminal escapes (CSI colour, OSC 0 window
title, OSC 52 clipboard write), BEL, backspaces, a carriage return, an 8-bit CSI, and
Rich/Textual markup that must show literally. The markup comes first so it is on screen even
where a column truncates the text.
"""

from __future__ import annotations

from grpo_tui.protocol import messages as m

MARKUP = "[bold]B[/bold] [link=https://x]L[/link] [red]R[/] :smile:"
ESCAPES = "\x1b[31mC\x1b[0m \x1b]0;pwned\x07 \x1b]52;c;cHduZWQ=\x07 bell\x07 bs\x08\x08 cr\rE \x9b2J end"
HOSTILE = f"{MARKUP} {ESCAPES}"
FORBIDDEN = "\x1b\x07\x08\r\x9b"  # none of these may reach the screen
LITERALS = ("[bold]B[/bold]", "[link=https://x]L[/link]", ":smile:")  # all of these must


def samples(step: int = 1, group_size: int = 2, prompts: int = 2) -> list[m.Sample]:
    out = []
    for g in range(prompts):
        for i in range(group_size):
            call = m.ToolCall(
                index=0, name=f"{MARKUP}\x1b[2J", arguments={"q": HOSTILE}, status="invalid_json",
                error=f"bad {HOSTILE}", raw=f"<tool_call>{HOSTILE}</tool_call>",
            )  # fmt: skip
            out.append(
                m.Sample(
                    step=step, index=g * group_size + i, group=g, prompt=f"{HOSTILE} prompt {g}",
                    completion=f"{HOSTILE} completion {g}.{i}", thinking=f"{HOSTILE} thinking",
                    reward=1.0 - i, reward_details={"accuracy": 1.0 - i}, advantage=0.5 - i,
                    num_tokens=10 + i, finish_reason="stop", tool_calls=[call],
                )  # fmt: skip
            )
    return out
