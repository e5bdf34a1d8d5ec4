"""Example custom reward functions for grpo-tui.

A reward is called TRL-style, once per batch of completions:

    fn(prompts, completions, **columns) -> list[float | None]

- `prompts[i]` is the prompt of completion i (a string, or a list of chat messages when the dataset's
  `prompt` column holds messages); `completions[i]` is the generated text.
- `columns` holds every other dataset column, one value per completion (here `answer=[...]`).
- Return one score per completion. `None` means "not applicable to this one": it is left out of the
  weighted sum instead of counting as 0.
- `async def` functions work the same way; use them for I/O (a judge model, a sandbox, an HTTP API).

Use them from a config next to the built-ins (paths are relative to the config file):

    [[rewards]]
    function = "rewards.py:brevity"
    weight = 0.2

    [[rewards]]
    function = "rewards.py:integer_answer"
    weight = 1.0
    timeout_s = 30
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

_ANSWER = re.compile(r"<answer>\s*(.*?)\s*</answer>", re.DOTALL)


def _text(completion: Any) -> str:
    """The completion's text: a string as is, or the content of a list of chat messages."""
    if isinstance(completion, str):
        return completion
    return "".join(str(m.get("content") or "") for m in completion)


def brevity(
    prompts: list[Any], completions: list[Any], target: int = 24, limit: int = 96, **columns: Any
) -> list[float | None]:
    """Reward short completions.

    score = 1                                   when len(text) <= target
          = (limit - len(text)) / (limit - target)  between target and limit
          = 0                                   when len(text) >= limit

    with len counted in characters. The defaults fit the arithmetic demo, whose ideal completion
    `<answer>68</answer>` is 19 characters.
    """
    scores: list[float | None] = []
    for completion in completions:
        n = len(_text(completion))
        scores.append(min(1.0, max(0.0, (limit - n) / (limit - target))))
    return scores


async def _check(completion: str, expected: int) -> float:
    # Stands in for a call to a remote verifier; awaiting it lets the calls run concurrently.
    await asyncio.sleep(0)
    match = _ANSWER.search(completion)
    try:
        return 1.0 if match and int(match.group(1)) == expected else 0.0
    except ValueError:
        return 0.0


async def integer_answer(
    prompts: list[Any], completions: list[Any], answer: list[Any], **columns: Any
) -> list[float | None]:
    """Async example: 1.0 when `<answer>N</answer>` holds the row's integer answer, else 0.0.

    Rows whose `answer` is not an integer score None (not applicable), so a mixed dataset can use
    this reward for its integer rows only. The checks run concurrently with `asyncio.gather`, as
    calls to a remote judge would.
    """
    scores: list[float | None] = [None] * len(completions)
    pending, slots = [], []
    for i, (completion, expected) in enumerate(zip(completions, answer)):
        try:
            value = int(str(expected).strip())
        except ValueError:
            continue
        pending.append(_check(_text(completion), value))
        slots.append(i)
    for i, score in zip(slots, await asyncio.gather(*pending)):
        scores[i] = score
    return scores
