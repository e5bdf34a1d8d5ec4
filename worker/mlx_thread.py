"""What runs on the worker's MLX thread besides the engine's own calls: building the engine's
``Trainer`` (MLX is imported there, never on the asyncio side) and freeing MLX's streams."""

from __future__ import annotations

import sys
from typing import Callable

from grpo_tui.protocol.config import Config
from grpo_tui.protocol.messages import LogLevel
from grpo_tui.worker.trainer_contract import Trainer

# How the loop builds its trainer on the MLX thread: ``make(config, log)``.
TrainerFactory = Callable[[Config, Callable[[LogLevel, str], None]], Trainer]


def engine_trainer(config: Config, log: Callable[[LogLevel, str], None]) -> Trainer:
    """The engine's trainer for ``config``; MLX loads here, on the MLX thread, after the user's files
    (tools, data, rewards) are read: their mistakes are said without waiting for MLX's import."""
    from grpo_tui.worker.engine.inputs import load_inputs

    # A judge reward loads a model: after the engine prepared the process for MLX (the trainer reads them then).
    inputs = None if any(r.judge is not None for r in config.rewards) else load_inputs(config)
    from grpo_tui.worker.engine.trainer import MlxTrainer

    return MlxTrainer(config, log, inputs)


def release_mlx_streams() -> None:
    """Destroy the MLX streams of the calling thread. MLX aborts the process at exit, now and then,
    when streams made on a thread outlive it (ml-explore/mlx#3126); each thread clears its own."""
    mx = sys.modules.get("mlx.core")
    if mx is not None and hasattr(mx, "clear_streams"):
        mx.clear_streams()
