"""The run's prompts: the training and eval rows rendered with the chat template and fitted to the
context, and which of them each step trains on (docs/architecture.md, "The step's spine"). The
order is a pure function of the step (a seeded shuffle per epoch), so a resume replays it; with
``[curriculum]`` the curriculum draws it (``prompts/curriculum.py``), its state kept in checkpoints.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from grpo_tui.protocol.config import Config
from grpo_tui.protocol.layout import CURRICULUM_FILE
from grpo_tui.protocol.messages import LogLevel
from grpo_tui.worker.engine.models import model_source
from grpo_tui.worker.engine.prompts import curriculum, data


class RunPrompts:
    """``batch(step)``: a step's epoch, place in it and rows; the schedule's steps and epochs."""

    def __init__(self, config: Config, dataset: list[data.Example], dataset_hash: str,
                 eval_dataset: list[data.Example] | None, log: Callable[[LogLevel, str], None]) -> None:
        self.config = config
        self.dataset = dataset
        self.dataset_hash = dataset_hash
        self.eval_dataset = eval_dataset
        self.log = log
        self.dataset_size = len(dataset)
        self.steps_per_epoch = data.steps_per_epoch(self.dataset_size, config.training.batch_size)
        self.num_epochs, self.total_steps = self._schedule()
        self.curriculum = curriculum.for_run(config, dataset, self.steps_per_epoch)  # None: [curriculum] is off

    def schedule_note(self) -> str | None:
        """What the log says when ``max_steps`` decides the run's length instead of ``num_epochs``."""
        t = self.config.training
        if t.max_steps > 0 and self.num_epochs != t.num_epochs:
            return (f"max_steps = {t.max_steps} overrides num_epochs = {t.num_epochs} (as in TRL): "
                    f"{self.num_epochs} passes over the {self.dataset_size} prompts")
        return None

    def _schedule(self) -> tuple[int, int]:
        t = self.config.training
        return data.schedule(self.steps_per_epoch, t.num_epochs, t.max_steps)

    def render(self, tokenizer: Any, eval_label: str) -> None:
        """Every prompt through the chat template, then cut or refused where it would not fit."""
        enable_thinking = self.config.generation.enable_thinking
        data.render(self.dataset, tokenizer, enable_thinking)
        self.fit(self.dataset, self.config.data.label, tokenizer)
        if self.eval_dataset is not None:
            data.render(self.eval_dataset, tokenizer, enable_thinking)
            self.fit(self.eval_dataset, eval_label, tokenizer)

    def fit(self, examples: list[data.Example], label: str, tokenizer: Any) -> None:
        """Before any rollout: cut the prompts (``max_prompt_length``) or refuse one that overflows
        the context; a prompt of any length otherwise reaches the model (and its memory)."""
        g = self.config.generation
        said = data.fit_prompts(examples, tokenizer, g.max_prompt_length, g.max_completion_length,
                                model_source.context_length(self.config.model.path), label)
        if said is not None:
            self.log("warning", said)

    def batch(self, step: int) -> tuple[int, int, list[int]]:
        """(epoch, step_in_epoch, dataset indices) of 1-based ``step``."""
        d, t = self.config.data, self.config.training
        if self.curriculum is not None:  # drawn from the prompts still being learned
            return self.curriculum.batch(step, self.config.curriculum)
        return data.batch_indices(step, self.dataset_size, t.batch_size, shuffle=d.shuffle, seed=d.seed)

    def examples(self, indices: list[int]) -> list[data.Example]:
        return [self.dataset[i] for i in indices]

    @property
    def eval_rows(self) -> list[data.Example]:
        """The prompts ``[eval]`` draws from: the eval split, else the training prompts."""
        return self.eval_dataset or self.dataset

    @property
    def every_prompt(self) -> list[data.Example]:
        return [*self.dataset, *(self.eval_dataset or [])]

    def follow(self, keys: list[str]) -> None:
        """The config now holds live changes of ``keys``: a new ``max_steps`` is a new schedule."""
        if "training.max_steps" in keys:
            self.num_epochs, self.total_steps = self._schedule()
        if "curriculum.strategy" in keys:
            self.curriculum = curriculum.switched(self.curriculum, self.config, self.dataset, self.steps_per_epoch)

    def live_problem(self, key: str, value: Any) -> str | None:
        return curriculum.problem(self.config, self.dataset, key, value)

    def save(self, directory: Path) -> None:
        """The curriculum's state beside a checkpoint's weights (a resume draws what the run would)."""
        if self.curriculum is not None:
            (directory / CURRICULUM_FILE).write_bytes(self.curriculum.to_bytes())

    def load(self, directory: Path) -> None:
        if self.curriculum is not None and (note := self.curriculum.load(directory / CURRICULUM_FILE)):
            self.log("warning", note)
