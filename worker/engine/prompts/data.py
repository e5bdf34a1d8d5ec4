"""The dataset: rows (``dataset_sources``: JSONL, JSON, CSV, Parquet, a saved folder, a hub id) ->
prompts rendered with the tokenizer's chat template.

Each row has a prompt (``data.prompt_column``: a string, TRL's "standard" format, or a list of chat
messages ``{"role", "content"}``, its "conversational" format), usually an answer
(``data.answer_column``) and any other columns; all columns but the prompt reach the reward
functions as keyword arguments. Tool schemas (a ``tools`` column, else the ``data.tools`` file) go to
the chat template.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from grpo_tui.common import data_check
from grpo_tui.protocol.config import DataConfig, RewardConfig
from grpo_tui.protocol.outcome import Mistake
from grpo_tui.worker.engine.prompts import dataset_sources


# The roles of TRL's conversational format; another passes into the chat template unchecked (some
# drop it, some render it as text), so the model trains on prompts nobody meant.
ROLES = data_check.ROLES


class DataError(Mistake, ValueError):
    """A dataset problem, a fixable mistake; the message names the file and line."""

    def __init__(self, sentence: str) -> None:
        super().__init__("data", sentence)


@dataclass
class Example:
    prompt: Any  # as in the dataset: str or list of messages (what reward functions receive)
    messages: list[dict[str, str]]  # the chat the model sees (system prompt included)
    columns: dict[str, Any]  # every other column, plus ``answer`` aliased from answer_column
    tools: list[dict[str, Any]] | None = None  # tool schemas for the chat template
    prompt_ids: list[int] = field(default_factory=list)
    prompt_text: str = ""
    cut: int = 0  # tokens cut from the prompt's left (generation.max_prompt_length)
    row: int = -1  # its row in the training data (the curriculum's key); -1 elsewhere


def read_dataset(path: str, config: DataConfig, split: str | None = None,
                 default_tools: list[dict[str, Any]] | None = None) -> tuple[list[Example], str]:
    """The examples of the dataset at ``path`` (any format ``dataset_sources`` reads) and its
    fingerprint for resume checks (a file's sha256, else the ``datasets`` fingerprint); a bad row's
    error names the file, the row and the column. ``default_tools`` (the ``[[tools]]`` schemas) are
    the tools of rows without a ``tools`` column, in place of the ``data.tools`` file's."""
    try:
        rows = dataset_sources.read(path, split=split or config.split, subset=config.subset)
        if default_tools is None and config.tools:
            default_tools = dataset_sources.read_tools_file(config.tools)
        tools = list(dataset_sources.iter_tools(rows, default_tools))
    except dataset_sources.DatasetSourceError as exc:
        raise DataError(str(exc)) from None
    examples = [_example(row, config, where) for where, row in rows.rows]
    if not examples:
        raise DataError(f"{rows.label}: the dataset is empty")
    if mixed := data_check.mixed_formats(rows.rows, config.prompt_column, rows.label):
        raise DataError(mixed)
    for example, row_tools in zip(examples, tools):
        example.tools = row_tools
    return examples, rows.fingerprint


def examples_of(rows: list[dict[str, Any]], config: DataConfig, label: str,
                default_tools: list[dict[str, Any]] | None = None) -> list[Example]:
    """Examples of rows given in memory (the engine API's prompts, generated tasks), checked as a
    file's rows are; ``default_tools`` as ``read_dataset`` takes them."""
    examples = [_example(row, config, f"{label} row {i + 1}") for i, row in enumerate(rows)]
    for example in examples:
        example.tools = default_tools
    return examples


def _example(row: dict[str, Any], config: DataConfig, where: str) -> Example:
    column = config.prompt_column
    if problem := data_check.row_problem(row, column, where):
        raise DataError(problem)
    prompt = row[column]  # its shape was checked by row_problem, shared with grpo-tui check
    messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else [dict(m) for m in prompt]
    if config.system_prompt and messages[0]["role"] != "system":
        messages.insert(0, {"role": "system", "content": config.system_prompt})
    columns = {k: v for k, v in row.items() if k != column}
    if config.answer_column != "answer" and config.answer_column in columns and "answer" not in columns:
        columns["answer"] = columns[config.answer_column]
    return Example(prompt=prompt, messages=messages, columns=columns)


def check_columns(examples: list[Example], config: DataConfig, rewards: list[RewardConfig], label: str) -> None:
    """Before any rollout: ``data.answer_column``, when set, names a column of the data, and every
    built-in reward that compares with a column has it (``common/data_check.py``)."""
    present = {k for ex in examples for k in ex.columns}
    if problem := data_check.columns_problem(present, config, rewards, label):
        raise Mistake("data", problem)


def check_same_format(train: list[Example], train_label: str, held_out: list[Example], eval_label: str) -> None:
    """Before any rollout: an eval set in another format than the training set (its rewards would
    get completions in a format they were not written for, and fail at the first evaluation)."""
    problem = data_check.eval_format_problem(train_label, data_check.dataset_format(e.prompt for e in train),
                                             eval_label, data_check.dataset_format(e.prompt for e in held_out))
    if problem:
        raise Mistake("data", problem)


def render(examples: list[Example], tokenizer: Any, enable_thinking: bool) -> None:
    """Fill ``prompt_ids`` / ``prompt_text`` with the chat template (plain text when there is none)."""
    has_template = getattr(tokenizer, "chat_template", None) is not None
    for ex in examples:
        if has_template:
            extra = {"tools": ex.tools} if ex.tools is not None else {}
            ids = tokenizer.apply_chat_template(
                ex.messages, add_generation_prompt=True, enable_thinking=enable_thinking, **extra
            )
        else:
            ids = tokenizer.encode("\n\n".join(str(m.get("content") or "") for m in ex.messages))
        ex.prompt_ids = list(ids)
        ex.prompt_text = tokenizer.decode(ex.prompt_ids)


def fit_prompts(examples: list[Example], tokenizer: Any, max_prompt_length: int | None, max_completion_length: int,
                context: int | None, label: str) -> str | None:
    """Cut every prompt longer than ``max_prompt_length`` tokens from the left (TRL's
    ``truncation_side="left"``: the end of the prompt, where the question and the generation prompt
    are, stays), then refuse a prompt that with ``max_completion_length`` overflows the model's
    ``context`` (None: unknown). Returns the sentence to log once about the cuts (None: no cut)."""
    cut = 0
    longest = 0
    for ex in examples:
        longest = max(longest, len(ex.prompt_ids))
        if max_prompt_length is not None and len(ex.prompt_ids) > max_prompt_length:
            ex.cut = len(ex.prompt_ids) - max_prompt_length
            ex.prompt_ids = ex.prompt_ids[-max_prompt_length:]
            ex.prompt_text = tokenizer.decode(ex.prompt_ids)
            cut += 1
    if context is not None:
        for i, ex in enumerate(examples):
            if len(ex.prompt_ids) + max_completion_length > context:
                room = context - max_completion_length
                fix = (f"set generation.max_prompt_length = {room} (prompts are then cut from the left)" if room > 0
                       else f"lower generation.max_completion_length below {context}")
                raise Mistake("data", f"{label} row {i + 1}: its prompt is {len(ex.prompt_ids):,} tokens, and with "
                                      f"generation.max_completion_length = {max_completion_length} it does not fit in "
                                      f"the model's context of {context:,} tokens (max_position_embeddings); {fix}")
    if not cut:
        return None
    return (f"generation.max_prompt_length = {max_prompt_length}: {cut} of the {len(examples)} prompts of {label} "
            f"are cut from the left (the longest is {longest:,} tokens); each step's prompts_truncated counts its cut prompts")


def columns_for(examples: list[Example]) -> dict[str, list[Any]]:
    """Column lists for reward kwargs; a column missing from a row is ``None`` there."""
    names = sorted({k for ex in examples for k in ex.columns})
    return {k: [ex.columns.get(k) for ex in examples] for k in names}


def steps_per_epoch(dataset_size: int, batch_size: int) -> int:
    return math.ceil(dataset_size / batch_size)


def schedule(steps_per_epoch: int, num_epochs: int, max_steps: int) -> tuple[int, int]:
    """``(num_epochs, total_steps)`` of a run, as TRL has it: ``max_steps > 0`` overrides the number
    of epochs, and the data is repeated (each pass a new epoch) as often as it takes."""
    if max_steps > 0:
        return math.ceil(max_steps / steps_per_epoch), max_steps
    return num_epochs, steps_per_epoch * num_epochs


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
