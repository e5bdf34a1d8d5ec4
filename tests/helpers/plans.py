"""Engine plans for tests and benchmarks that drive the engine's pieces without a trainer.

Every path that picks a way to run takes the plan; ``stock_plan`` is the plan a rollout-only caller
wants, ``plan.for_generation``'s: the compiled loop wherever ``fastgen`` supports the model,
mlx-lm's BatchGenerator elsewhere, with MLX's own kernels and sampler (no x86 patches, no numpy draw).
"""

from __future__ import annotations

from typing import Any

from grpo_tui.protocol.config import GenerationConfig
from grpo_tui.worker.engine.models import plan as engine_plan
from grpo_tui.worker.engine.models.plan import EnginePlan


def stock_plan(model: Any, gen: GenerationConfig | None = None) -> EnginePlan:
    """The plan of a rollout with ``gen`` on ``model``, MLX's own kernels and sampler."""
    return engine_plan.for_generation(model, (gen or GenerationConfig()).repetition_penalty)
