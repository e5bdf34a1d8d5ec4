"""What runs on the worker's MLX thread besides the engine's own calls: choosing the engine's
``Trainer`` class (MLX is imported there, never on the asyncio side) and freeing MLX's streams."""

from __future__ import annotations

import importlib.util
import os
import sys

from .records import Trainer


def trainer_class() -> type[Trainer]:
    """The engine's Trainer. ``GRPO_TUI_TRAINER=file.py:Class`` swaps in a fake, for tests only."""
    spec = os.environ.get("GRPO_TUI_TRAINER")
    if not spec:
        from .engine.trainer import Trainer as EngineTrainer  # MLX loads here, on the MLX thread

        return EngineTrainer
    file, name = spec.rsplit(":", 1)
    module_spec = importlib.util.spec_from_file_location("grpo_tui_fake_trainer", file)
    assert module_spec is not None and module_spec.loader is not None
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return getattr(module, name)


def release_mlx_streams() -> None:
    """Destroy the MLX streams of the calling thread. MLX aborts the process at exit, now and then,
    when streams made on a thread outlive it (ml-explore/mlx#3126); each thread clears its own."""
    mx = sys.modules.get("mlx.core")
    if mx is not None and hasattr(mx, "clear_streams"):
        mx.clear_streams()
