"""grpo-tui: GRPO training on MLX, watched from a terminal dashboard.

The Python API is shaped like TRL's (docs/python-api.md)::

    from grpo_tui import GRPOConfig, GRPOTrainer

    trainer = GRPOTrainer(model="Qwen/Qwen3-0.6B", reward_funcs=[my_reward],
                          args=GRPOConfig(output_dir="runs/x"), train_dataset=rows)
    trainer.train()

It writes a TOML config and runs the same worker process as ``grpo-tui run`` / ``grpo-tui worker``.
``grpo_tui.protocol``, ``grpo_tui.worker`` and ``grpo_tui.tui`` are the packages underneath.
"""

from grpo_tui.protocol import __version__

from .config import GRPOConfig
from .trainer import GRPOTrainer, TrainerState, TrainingError

__all__ = ["GRPOConfig", "GRPOTrainer", "TrainerState", "TrainingError", "__version__"]
