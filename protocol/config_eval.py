"""Config pieces of the training features: ``[eval]``, the LR schedule and the early-stop rules
of ``[generation]`` (docs/config.md)."""

from __future__ import annotations

from typing import Any, Literal

from .config_base import Section, invalid

SchedulerType = Literal["constant", "linear", "cosine", "constant_with_warmup", "cosine_with_min_lr"]


class EvalConfig(Section):
    """Held-out evaluation between steps; on when the ``[eval]`` table is present."""

    every: int = 50  # steps between evaluations; 0 = only at the start and the end
    at_start: bool = True
    at_end: bool = True
    limit: int = 0  # prompts; 0 = all
    greedy: bool = True
    num_samples: int = 1  # completions per prompt; > 1 adds pass@k
    batch_size: int = 16  # prompts per generation batch (commands are answered between batches)

    def __post_init__(self) -> None:
        if self.every < 0:
            raise invalid("every", self.every, "must be >= 0 (0 = only at the start and the end)")
        if self.limit < 0:
            raise invalid("limit", self.limit, "must be >= 0 (0 = every eval prompt)")
        if self.num_samples < 1:
            raise invalid("num_samples", self.num_samples, "must be at least 1")
        if self.num_samples > 1 and self.greedy:
            raise invalid("num_samples", self.num_samples, "needs eval.greedy = false (greedy samples are identical)")
        if self.batch_size < 1:
            raise invalid("batch_size", self.batch_size, "must be at least 1")


def check_schedule(training: Any) -> None:
    """``[training]``'s schedule keys (called from ``TrainingConfig.__post_init__``)."""
    if training.warmup_steps < 0:
        raise invalid("warmup_steps", training.warmup_steps, "must be >= 0")
    if not 0.0 <= training.warmup_ratio < 1.0:
        raise invalid("warmup_ratio", training.warmup_ratio, "must be in [0, 1)")
    if not 0.0 <= training.min_lr_rate <= 1.0:
        raise invalid("min_lr_rate", training.min_lr_rate, "must be in [0, 1]")


def check_stops(generation: Any) -> None:
    """``[generation]``'s early-stop keys (called from ``GenerationConfig.__post_init__``)."""
    if any(not s for s in generation.stop):
        raise invalid("stop", generation.stop, "must not contain an empty string")
    if generation.repetition_stop_ngram < 0:
        raise invalid("repetition_stop_ngram", generation.repetition_stop_ngram, "must be >= 0 (0 = off)")
    count = generation.repetition_stop_count
    if count < 0 or count == 1:
        raise invalid("repetition_stop_count", count, "must be 0 (off) or at least 2")
    if (generation.repetition_stop_ngram > 0) != (count > 0):
        raise invalid(
            "repetition_stop_count" if count == 0 else "repetition_stop_ngram",
            count if count == 0 else generation.repetition_stop_ngram,
            "— set both repetition_stop_ngram and repetition_stop_count (or neither)",
        )
