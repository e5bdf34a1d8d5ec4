"""Learning-rate schedules with TRL / transformers' names and formulas, as pure functions.

``lr_at(step, ...)`` is the learning rate that the update of ``step`` (1-based) uses. transformers
calls ``scheduler.step()`` after each optimizer step, so update k (0-based) runs with
``lr_lambda(k)``: the first update of a warmup schedule uses 0. We use the same convention, so a
TRL config and ours give the same sequence.

Because the rate is a function of the step alone, resuming needs no scheduler state: the step in
``training_state.json`` *is* the schedule state (docs/config.md, "training").
"""

from __future__ import annotations

import math
import typing

from grpo_tui.protocol.config import TrainingConfig
from grpo_tui.protocol.config import SchedulerType

SCHEDULER_TYPES: tuple[str, ...] = typing.get_args(SchedulerType)


def warmup_steps(total_steps: int, steps: int = 0, ratio: float = 0.0) -> int:
    """Warmup length: ``steps`` when given, else ``ceil(ratio * total_steps)`` (transformers'
    ``get_warmup_steps``)."""
    return steps if steps > 0 else math.ceil(total_steps * ratio)


def lr_factor(kind: str, k: int, warmup: int, total: int, min_lr_rate: float = 0.0) -> float:
    """The multiplier of the base rate after ``k`` optimizer steps (transformers' ``lr_lambda(k)``)."""
    if kind == "constant":
        return 1.0
    if k < warmup:
        return float(k) / float(max(1, warmup))
    if kind == "constant_with_warmup":
        return 1.0
    if kind == "linear":
        return max(0.0, float(total - k) / float(max(1, total - warmup)))
    if kind in ("cosine", "cosine_with_min_lr"):
        rate = min_lr_rate if kind == "cosine_with_min_lr" else 0.0
        progress = float(k - warmup) / float(max(1, total - warmup))
        factor = 0.5 * (1.0 + math.cos(math.pi * 0.5 * 2.0 * progress))  # num_cycles = 0.5
        return max(0.0, factor * (1 - rate) + rate)
    raise ValueError(f"unknown lr_scheduler_type {kind!r}")


def lr_at(
    step: int,
    base_lr: float,
    kind: str,
    total_steps: int,
    *,
    warmup_steps_: int = 0,
    warmup_ratio: float = 0.0,
    min_lr_rate: float = 0.0,
) -> float:
    """The learning rate of the update made at ``step`` (1-based) of a ``total_steps`` run."""
    warmup = warmup_steps(total_steps, warmup_steps_, warmup_ratio)
    return base_lr * lr_factor(kind, max(0, step - 1), warmup, total_steps, min_lr_rate)


def scheduled_lr(step: int, training: TrainingConfig, total_steps: int) -> float:
    """``lr_at`` with a ``[training]`` table's settings."""
    return lr_at(
        step, training.learning_rate, training.lr_scheduler_type, total_steps,
        warmup_steps_=training.warmup_steps, warmup_ratio=training.warmup_ratio, min_lr_rate=training.min_lr_rate,
    )  # fmt: skip
