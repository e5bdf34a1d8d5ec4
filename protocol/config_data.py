"""``[data]``: the training and eval rows and their columns (docs/config.md)."""

from __future__ import annotations

from grpo_tui.protocol.config_base import SEP as _SEP, Section as _Section, invalid as _invalid
from grpo_tui.protocol.config_environments import ReasoningGymConfig


class DataConfig(_Section):
    path: str = ""  # a JSONL/JSON/CSV/Parquet file, a datasets save_to_disk folder or a hub dataset id
    reasoning_gym: ReasoningGymConfig | None = None  # instead of path: tasks generated in the worker
    eval_path: str | None = None
    split: str = "train"  # of a save_to_disk DatasetDict or a hub dataset
    eval_split: str | None = None  # held-out split of data.path when eval_path is not given
    subset: str | None = None  # a hub dataset's configuration name
    tools: str | None = None  # a JSON file of tool schemas for rows without a ``tools`` column
    system_prompt: str | None = None
    prompt_column: str = "prompt"
    answer_column: str = "answer"
    shuffle: bool = True
    seed: int = 0

    def __post_init__(self) -> None:
        if self.path == "" and self.reasoning_gym is None:
            raise ValueError(f"path{_SEP}is required: a JSONL, JSON, CSV or Parquet file, a saved dataset folder or a hub "
                             f"dataset id (or data.reasoning_gym instead, for generated tasks)")
        if self.path != "" and self.reasoning_gym is not None:
            raise _invalid("path", self.path, "— give data.path or data.reasoning_gym, not both")
        if self.reasoning_gym is not None and (self.eval_path is not None or self.eval_split is not None):
            key = "eval_path" if self.eval_path is not None else "eval_split"
            raise _invalid(key, getattr(self, key), "— data.reasoning_gym makes its own eval rows (its eval_seed, eval_size)")

    @property
    def label(self) -> str:
        """How messages name the training data."""
        return "data.reasoning_gym" if self.reasoning_gym is not None else self.path
