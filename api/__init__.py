"""grpo-tui: GRPO training on MLX, watched from a terminal dashboard.

The Python API is shaped like TRL's (docs/python-api.md)::

    from grpo_tui import GRPOConfig, GRPOTrainer

    trainer = GRPOTrainer(model="Qwen/Qwen3-0.6B", reward_funcs=[my_reward],
                          args=GRPOConfig(output_dir="runs/x"), train_dataset=rows)
    trainer.train()

It writes a TOML config and runs the same worker process as ``grpo-tui run`` / ``grpo-tui worker``.
``Engine(config)`` runs the same trainer in this process instead, one phase at a time (``generate``,
``score``, ``train_step``).
``grpo_tui.protocol``, ``grpo_tui.worker`` and ``grpo_tui.tui`` are the packages underneath.
"""

from typing import TYPE_CHECKING, Any

from grpo_tui.protocol import __version__

if TYPE_CHECKING:
    from grpo_tui.config import GRPOConfig
    from grpo_tui.trainer import GRPOTrainer, TrainerState, TrainingError
    from grpo_tui.worker.engine.stepwise import Engine

__all__ = ["Engine", "GRPOConfig", "GRPOTrainer", "TrainerState", "TrainingError", "__version__"]


def __getattr__(name: str) -> Any:
    """The API's classes are imported on first use: every ``grpo-tui`` command (the worker, the
    supervisor, the dashboard) imports this package first, and needs none of them."""
    if name == "GRPOConfig":
        from grpo_tui.config import GRPOConfig

        return GRPOConfig
    if name in ("GRPOTrainer", "TrainerState", "TrainingError"):
        from grpo_tui import trainer

        return getattr(trainer, name)
    if name == "Engine":  # the engine in this process, step by step: MLX comes in here
        from grpo_tui.worker.engine.stepwise import Engine

        return Engine
    raise AttributeError(f"module 'grpo_tui' has no attribute {name!r}")
