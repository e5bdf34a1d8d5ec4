"""The dataset: JSONL rows -> prompts rendered with the tokenizer's chat template.

Each line is a JSON object with a prompt (``data.prompt_column``: a string, or a list of chat
messages ``{"role", "content"}``), usually an answer (``data.answer_column``) and any other columns;
all columns but the prompt reach the reward functions as keyword arguments.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from grpo_tui.protocol.config import DataConfig


class DataError(ValueError):
    """A dataset problem; the message names the file and line."""


@dataclass
class Example:
    prompt: Any  # as in the dataset: str or list of messages (what reward functions receive)
    messages: list[dict[str, str]]  # the chat the model sees (system prompt included)
    columns: dict[str, Any]  # every other column, plus ``answer`` aliased from answer_column
    prompt_ids: list[int] = field(default_factory=list)
    prompt_text: str = ""


def file_hash(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def read_jsonl(path: str | Path, config: DataConfig) -> list[Example]:
    examples = []
    with open(path, encoding="utf-8") as f:
        for line_no, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DataError(f"{path}:{line_no}: not valid JSON ({exc})") from None
            if not isinstance(row, dict) or config.prompt_column not in row:
                raise DataError(f"{path}:{line_no}: no {config.prompt_column!r} column")
            examples.append(_example(row, config, f"{path}:{line_no}"))
    if not examples:
        raise DataError(f"{path}: the dataset is empty")
    return examples


def _example(row: dict[str, Any], config: DataConfig, where: str) -> Example:
    prompt = row[config.prompt_column]
    if isinstance(prompt, str):
        messages = [{"role": "user", "content": prompt}]
    elif isinstance(prompt, list) and all(isinstance(m, dict) and "role" in m and "content" in m for m in prompt):
        messages = [dict(m) for m in prompt]
    else:
        raise DataError(f"{where}: {config.prompt_column!r} must be a string or a list of {{role, content}} messages")
    if config.system_prompt and messages[0]["role"] != "system":
        messages.insert(0, {"role": "system", "content": config.system_prompt})
    columns = {k: v for k, v in row.items() if k != config.prompt_column}
    if config.answer_column != "answer" and config.answer_column in columns and "answer" not in columns:
        columns["answer"] = columns[config.answer_column]
    return Example(prompt=prompt, messages=messages, columns=columns)


def render(examples: list[Example], tokenizer: Any, enable_thinking: bool) -> None:
    """Fill ``prompt_ids`` / ``prompt_text`` with the chat template (plain text when there is none)."""
    has_template = getattr(tokenizer, "chat_template", None) is not None
    for ex in examples:
        if has_template:
            ids = tokenizer.apply_chat_template(
                ex.messages, add_generation_prompt=True, enable_thinking=enable_thinking
            )
        else:
            ids = tokenizer.encode("\n\n".join(m["content"] for m in ex.messages))
        ex.prompt_ids = list(ids)
        ex.prompt_text = tokenizer.decode(ex.prompt_ids)


def columns_for(examples: list[Example]) -> dict[str, list[Any]]:
    """Column lists for reward kwargs; a column missing from a row is ``None`` there."""
    names = sorted({k for ex in examples for k in ex.columns})
    return {k: [ex.columns.get(k) for ex in examples] for k in names}


def steps_per_epoch(dataset_size: int, batch_size: int) -> int:
    return math.ceil(dataset_size / batch_size)


def batch_indices(step: int, dataset_size: int, batch_size: int, *, shuffle: bool, seed: int) -> tuple[int, int, list[int]]:
    """(epoch, step_in_epoch, indices) for the 1-based global ``step``. The order of an epoch is a
    permutation seeded by ``seed + epoch``; a short last batch is topped up from the epoch's start so
    every step has ``batch_size`` prompts."""
    per_epoch = steps_per_epoch(dataset_size, batch_size)
    epoch, in_epoch = divmod(step - 1, per_epoch)
    order = np.random.default_rng(seed + epoch).permutation(dataset_size) if shuffle else np.arange(dataset_size)
    start = in_epoch * batch_size
    picks = [int(order[(start + i) % dataset_size]) for i in range(batch_size)]
    return epoch, in_epoch + 1, picks
