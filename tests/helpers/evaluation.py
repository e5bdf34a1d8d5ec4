"""Held-out reward means of a trainer, for the learning test and ``bench/quick_grpo.py``."""

from __future__ import annotations

from typing import Any

from grpo_tui.protocol.messages import mean_of


def reward_means(trainer: Any, limit: int | None = None, greedy: bool = True) -> dict[str, float | None]:
    """Each reward function's mean on the first ``limit`` eval prompts, one completion each (the
    trainer's ``evaluate_batch``, what the worker's ``[eval]`` runs)."""
    batch = trainer.evaluate_batch(list(range(trainer.eval_size))[:limit], greedy=greedy, num_samples=1, seed=None)
    return {label: mean_of(values) for label, values in batch.per_fn.items()}
