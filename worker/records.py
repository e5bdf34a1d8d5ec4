"""The contract between the engine (``engine.trainer``) and the process around it (``loop``,
``store``, ``checkpoint``): what a trainer offers and what one training step hands back
(docs/architecture.md, "Processes"). No MLX here: the process side imports this.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Protocol, runtime_checkable

from grpo_tui.protocol.messages import Phase, Sample, SampleDisplay, Step, ToolCall, Turn


@dataclass
class Generation:
    """One completion with everything the store keeps about it."""

    prompt_index: int  # index of the prompt within the step's batch
    group_index: int  # index of the completion within its group (0..G-1)
    prompt: str  # the rendered prompt text shown to the model
    completion: str  # the answer text, thinking removed
    raw_completion: str  # exactly what the model produced (decoded from its token ids)
    thinking: str | None
    reward: float | None  # weighted sum over reward functions
    reward_details: dict[str, float | None]  # per reward function (unweighted), None = not applicable
    advantage: float | None
    num_tokens: int
    finish_reason: str  # stop | length | repetition
    tool_calls: list[ToolCall] = field(default_factory=list)
    reward_notes: dict[str, str] = field(default_factory=dict)  # per reward function (log_extra)
    turns: list[Turn] = field(default_factory=list)  # agent rollouts: the conversation turn by turn
    dropped: bool = False  # dynamic sampling: its group's rewards were all equal, not trained on

    def to_sample(self, step: int, group_size: int, display: SampleDisplay | None = None) -> Sample:
        return Sample(
            step=step,
            index=self.prompt_index * group_size + self.group_index,
            group=self.prompt_index,
            prompt=self.prompt,
            completion=self.completion,
            reward=self.reward,
            reward_details=self.reward_details,
            advantage=self.advantage,
            num_tokens=self.num_tokens,
            finish_reason=self.finish_reason,  # type: ignore[arg-type]
            thinking=self.thinking,
            tool_calls=self.tool_calls,
            reward_notes=self.reward_notes,
            turns=self.turns,
            display=display,
        )


@dataclass
class StepOutput:
    """The result of ``Trainer.train_step``: the ``step`` metrics and every generation."""

    metrics: Step
    generations: list[Generation]


@dataclass
class EvalBatch:
    """One batch of a held-out evaluation: ``num_samples`` consecutive completions per prompt."""

    per_fn: dict[str, list[float | None]]  # each reward function's scores
    totals: list[float | None]  # weighted sums
    lengths: list[int]  # completion tokens
    finish: list[str]  # finish reasons


@runtime_checkable
class Trainer(Protocol):
    """What the worker uses of a trainer: ``engine.trainer.Trainer``, or a test's fake. Built as
    ``Trainer(config, log)`` on the MLX thread, and called only there."""

    model_name: str
    dataset_size: int
    dataset_hash: str
    steps_per_epoch: int
    num_epochs: int
    total_steps: int

    def batch(self, step: int) -> tuple[int, int, list[int]]:
        """(epoch, step_in_epoch, dataset indices) of ``step`` (1-based): a pure function of it."""
        ...

    def train_step(self, step: int, on_phase: Callable[[Phase], None] = ...) -> StepOutput:
        """Train one step; ``on_phase`` hears "generating", "scoring" and "training" as they begin."""
        ...

    @property
    def eval_size(self) -> int:
        """Prompts available to ``[eval]``."""
        ...

    def evaluate_batch(self, indices: list[int], *, greedy: bool, num_samples: int, seed: int | None) -> EvalBatch:
        """``num_samples`` completions for each eval prompt of ``indices``, scored."""
        ...

    def leader_value(self, value: int) -> int:
        """Rank 0's ``value`` on every rank (a single process: ``value``)."""
        ...

    def sync_from_leader(self, step: int) -> int:
        """Rank 0's weights, optimizer state and ``step`` on every rank."""
        ...

    def leader_bytes(self, payload: bytes) -> bytes:
        """Rank 0's ``payload`` on every rank (a boundary's live changes)."""
        ...

    def live_problem(self, key: str, value: object) -> str | None:
        """Why the loaded model cannot take a live change (None: it can); answers off the MLX thread."""
        ...

    def settings_changed(self, keys: list[str]) -> None:
        """The shared config now holds live changes of ``keys``: follow them (weights, length, traces)."""
        ...

    def save_model(self, directory: Path) -> None: ...

    def save_optimizer(self, path: Path) -> None: ...

    def load_checkpoint(self, directory: Path) -> None: ...
