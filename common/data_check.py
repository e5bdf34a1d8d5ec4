"""What is wrong with a dataset's rows, as one sentence each: shared by the worker (every row, at
load, before any rollout) and ``grpo-tui check`` (the first rows of a local file, read here with the
standard library), so both say the same thing.

A prompt is a string (TRL's "standard" format) or a list of chat messages (its "conversational"
format); reward functions get prompts and completions in the data's format, so one dataset, and
its eval set, must use one format.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from grpo_tui.protocol.config import Config, DataConfig, RewardConfig

# Built-in rewards that compare with a dataset column, and the column.
REWARD_COLUMNS = {"accuracy": "answer"}
ALL_ROWS = 1 << 62  # ``grpo-tui check`` reads every row of a local file, as the worker does

Where = str  # "file:line" or "file row N"


def prompt_format(prompt: Any) -> str | None:
    """"standard" (a string), "conversational" (a list of messages) or None (neither)."""
    if isinstance(prompt, str):
        return "standard"
    if isinstance(prompt, list) and prompt and all(isinstance(m, dict) for m in prompt):
        return "conversational"
    return None


def describe_format(fmt: str) -> str:
    return {"standard": "string prompts (TRL's standard format)",
            "conversational": "lists of chat messages (TRL's conversational format)"}[fmt]


ROLES = ("system", "user", "assistant", "tool")


def is_message(m: Any) -> bool:
    # an assistant turn that only calls tools has tool_calls and no content
    return isinstance(m, dict) and isinstance(m.get("role"), str) and ("content" in m or "tool_calls" in m)


def _kind(value: Any) -> str:
    if isinstance(value, list):
        bad = next((m for m in value if not is_message(m)), None)
        return "an empty list" if not value else f"a list holding {json.dumps(bad, default=str)[:60]}"
    return f"{type(value).__name__} {json.dumps(value, default=str)[:40]}"


def row_problem(row: dict[str, Any], column: str, where: Where) -> str | None:
    """What the worker refuses in a row's prompt: none, null, empty, neither a string nor a list of
    ``{role, content}`` messages, or a message with a role chat templates do not know."""
    if column in row and row[column] is None:
        return f"{where}: the {column!r} column is null; give every row a {column} (or remove the row)"
    if column not in row:
        return f"{where}: no {column!r} column (the row has {', '.join(map(repr, row)) or 'no columns'})"
    prompt = row[column]
    if isinstance(prompt, str):
        if not prompt.strip():
            return f"{where}: the {column!r} column is empty; give every row a {column} (or remove the row)"
        return None
    if not (isinstance(prompt, list) and prompt and all(is_message(m) for m in prompt)):
        return f"{where}: column {column!r} must be a string or a list of {{role, content}} messages, not {_kind(prompt)}"
    for i, message in enumerate(prompt):
        if message["role"] not in ROLES:
            return (f"{where}: message {i} of column {column!r} has the role {message['role']!r}; the roles are "
                    f"{', '.join(ROLES)} (fix the row, or map the role when you build the data)")
    return None


def mixed_formats(rows: Iterable[tuple[Where, dict[str, Any]]], column: str, label: str) -> str | None:
    """Rows of both formats in one dataset: the first row of the other format, and this one."""
    first: dict[str, Where] = {}
    for where, row in rows:
        fmt = prompt_format(row.get(column))
        if fmt is None or fmt in first:
            continue
        if first:
            (other, there), = first.items()
            return (f"{where}: the {column!r} column is {_A[fmt]} ({fmt} format), but {there} has {_A[other]} "
                    f"({other} format); write every row of {label} in one format (reward functions get prompts and "
                    "completions in the data's format)")
        first[fmt] = where
    return None


_A = {"standard": "a string", "conversational": "a list of chat messages"}


def dataset_format(prompts: Iterable[Any]) -> str | None:
    return next((f for f in map(prompt_format, prompts) if f is not None), None)


def eval_format_problem(train_label: str, train_format: str | None, eval_label: str, eval_format: str | None) -> str | None:
    """An eval set in another format than the training set: its rewards would get the other format."""
    if train_format is None or eval_format is None or train_format == eval_format:
        return None
    return (f"the eval set {eval_label} has {describe_format(eval_format)}, but the training set {train_label} has "
            f"{describe_format(train_format)}; the same reward functions score both, so convert {eval_label} to the "
            f"{train_format} format")


def columns_problem(present: set[str], config: DataConfig, rewards: Sequence[RewardConfig], label: str) -> str | None:
    """``data.answer_column``, when set, names a column of the data, and every built-in reward that
    compares with a column has it (else ``accuracy`` scores every completion None: the run trains
    on nothing, silently). ``present``: every column but the prompt."""
    have = ", ".join(repr(k) for k in sorted(present)) or "none besides the prompt"
    if config.answer_column != "answer" and config.answer_column not in present:
        return (f"data.answer_column = {config.answer_column!r}, but no row of {label} has that column (its columns: "
                f"{have}); set data.answer_column to the column that holds the answers")
    aliased = present | ({"answer"} if config.answer_column in present else set())
    for reward in rewards:
        if reward.name == "reasoning_gym" and "metadata" not in present:
            return (f"the 'reasoning_gym' reward scores each completion with its row's reasoning-gym entry (the "
                    f"'answer' and 'metadata' columns), and no row of {label} has 'metadata' (its columns: {have}); "
                    f"generate the rows with data.reasoning_gym, or keep reasoning-gym's columns in the file")
        needed = REWARD_COLUMNS.get(reward.name or "")
        if needed is not None and needed not in aliased:
            return (f"the {reward.name!r} reward compares completions with the {needed!r} column, which no row of "
                    f"{label} has (its columns: {have}); set data.answer_column to the column that holds the answers")
    return None


def small_data_note(rows: int, batch_size: int, label: str) -> str | None:
    """A dataset with fewer rows than one step's batch: every step trains on the same rows, each
    several times over (TRL repeats them too), which is worth a word before the run."""
    if 0 < rows < batch_size:
        each = "its row" if rows == 1 else f"each of its {rows} rows"
        return (f"{label} has {rows} row{'s' if rows != 1 else ''} and training.batch_size is {batch_size}: every step "
                f"trains on {each} about {batch_size // rows} times over; add rows or lower training.batch_size")
    return None


# ---------------------------------------------------------------- grpo-tui check


class RowsError(ValueError):
    """A line of a JSONL file that is not a row: its sentence names the file and the line."""


def jsonl_rows(path: Path, limit: int = ALL_ROWS) -> list[tuple[Where, dict[str, Any]]]:
    """The rows of a JSONL file, each with its ``file:line``; ``RowsError`` for a line that is not
    UTF-8, not JSON or not an object (the worker's reader and ``grpo-tui check`` both use this)."""
    rows: list[tuple[Where, dict[str, Any]]] = []
    with open(path, "rb") as f:
        for line_no, raw in enumerate(f, 1):
            try:
                line = raw.decode("utf-8-sig" if line_no == 1 else "utf-8")
            except UnicodeDecodeError as exc:
                raise RowsError(f"{path}:{line_no}: not UTF-8 (byte 0x{raw[exc.start]:02x} at column "
                                f"{exc.start + 1}); save the file as UTF-8") from None
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise RowsError(f"{path}:{line_no}: not valid JSON ({exc})") from None
            if not isinstance(row, dict):
                raise RowsError(f"{path}:{line_no}: a row must be a JSON object, not {type(row).__name__}")
            rows.append((f"{path}:{line_no}", row))
            if len(rows) >= limit:
                break
    return rows


def first_rows(path: str, split: str = "train", limit: int = ALL_ROWS) -> list[tuple[Where, dict[str, Any]]] | None:
    """The first rows of a local JSONL, JSON or CSV file; None for what only the worker reads
    (Parquet, a saved folder, a hub id) and for a file that does not parse (the worker says where)."""
    p = Path(path)
    if not p.is_file():
        return None
    suffix = p.suffix.lower()
    rows: list[tuple[Where, dict[str, Any]]] = []
    try:
        if suffix == ".jsonl":
            rows = jsonl_rows(p, limit)  # a RowsError goes to the caller, with its sentence
        elif suffix == ".json":
            data = json.loads(p.read_text(encoding="utf-8-sig"))
            if isinstance(data, dict):
                data = data.get(split)  # {"<split>": [...]}, as the worker reads it
            if not isinstance(data, list) or not all(isinstance(r, dict) for r in data[:limit]):
                return None
            rows = [(f"{p} row {i}", r) for i, r in enumerate(data[:limit], 1)]
        elif suffix == ".csv":
            with open(p, encoding="utf-8-sig", newline="") as f:
                for i, row in enumerate(csv.DictReader(f), 1):
                    rows.append((f"{p} row {i}", {k: v for k, v in row.items() if k is not None}))
                    if len(rows) >= limit:
                        break
        else:
            return None
    except RowsError:
        raise
    except (OSError, ValueError):  # a JSON or CSV file that does not parse: the worker names where
        return None
    return rows


def data_problems(config: Config) -> list[str]:
    """What the worker would refuse in the data's first rows: a row without its prompt, mixed
    formats, a reward's column that no row has, an eval set in another format."""
    d = config.data
    try:
        train = first_rows(d.path, d.split)
    except RowsError as exc:
        return [str(exc)]
    if train is None:
        return []
    if not train:
        return [f"{d.path}: the dataset is empty"]
    problems = [p for p in (row_problem(row, d.prompt_column, where) for where, row in train) if p][:1]
    if problems:
        return problems
    if p := mixed_formats(train, d.prompt_column, d.path):
        return [p]
    present = {k for _, row in train for k in row if k != d.prompt_column}
    whole = len(train) < ALL_ROWS  # "no row has it" only when every row was read
    if whole and (p := columns_problem(present, d, config.rewards, d.path)):
        return [p]
    try:
        held_out = first_rows(d.eval_path, d.split) if d.eval_path else None
    except RowsError as exc:
        return [str(exc)]
    if d.eval_path and held_out:
        train_format = dataset_format(row.get(d.prompt_column) for _, row in train)
        eval_format = dataset_format(row.get(d.prompt_column) for _, row in held_out)
        if p := eval_format_problem(d.path, train_format, d.eval_path, eval_format):
            return [p]
    return []
