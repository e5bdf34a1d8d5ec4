"""The contract between the engine (``engine.trainer``) and the process around it (``loop``,
``store``, ``checkpoint``): what a trainer offers and what one training step hands back
(docs/architecture.md, "Processes"). No MLX here: the process side imports this.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Protocol, runtime_checkable

from grpo_tui.protocol.messages import SCORED_COMPLETION_FIELDS, Phase, Sample, SampleDisplay, ScoredCompletion, Step


class SaidFailure(RuntimeError):
    """A crash whose message is a whole sentence naming what failed (a built-in reward, a judge
    model): the loop says it as it is, not as ``Type: message``. Raised by the engine, caught by the
    loop: its type lives here, at the seam."""


class RankLost(RuntimeError):
    """A collective failed because a peer left (its process died or its link broke)."""


class Generation(ScoredCompletion, kw_only=True):
    """One completion with everything the store keeps about it: the protocol's ``ScoredCompletion``
    (the fields the dashboard shows too, declared there once) and where it came from."""

    prompt_index: int  # index of the prompt within the step's batch
    group_index: int  # index of the completion within its group (0..G-1)
    raw_completion: str  # exactly what the model produced (decoded from its token ids)
    dropped: bool = False  # dynamic sampling: its group's rewards were all equal, not trained on
    policy_step: int | None = None  # [async]: the learner step whose weights sampled it (None: step - 1)

    def to_sample(self, step: int, group_size: int, display: SampleDisplay | None = None) -> Sample:
        """This completion as a ``sample`` frame of ``step``: its shared fields as they are."""
        shared = {name: getattr(self, name) for name in SCORED_COMPLETION_FIELDS}
        return Sample(step=step, index=self.prompt_index * group_size + self.group_index, group=self.prompt_index,
                      display=display, **shared)


@dataclass
class PromptVisit:
    """A prompt's group in a step under ``[curriculum]`` (the store's ``prompt_visits``): its place in
    the step (as its generations' ``prompt_index``), its dataset row, this visit's share of passing
    completions, the decayed pass rate and state after it, and its visits so far."""

    step: int
    prompt_index: int
    prompt_row: int
    passed: float
    pass_rate: float
    state: str
    visits: int


@dataclass
class StepOutput:
    """The result of ``Trainer.train_step``: the ``step`` metrics, every generation and, under a
    curriculum, the step's prompt visits."""

    metrics: Step
    generations: list[Generation]
    prompt_visits: list[PromptVisit] = field(default_factory=list)


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

    @property
    def num_epochs(self) -> int:
        """Passes over the data (``max_steps`` decides it when set; a live change can move it)."""
        ...

    @property
    def total_steps(self) -> int:
        """The run's length in optimizer steps."""
        ...

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

    def close(self) -> None:
        """The run is over (done, stopped or failed): end what the trainer started ([async]'s generator)."""
        ...
