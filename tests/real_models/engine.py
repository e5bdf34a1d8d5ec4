"""The one place these tests import the MLX engine from.

worker/ is being restructured (``grpo_tui.worker.trainer`` -> ``grpo_tui.worker.engine.trainer``);
when the move lands, only ``TRAINER_MODULES`` needs to change (or nothing, while both are tried).
Everything else the tests need (``rollout``, ``data``, ``split_thinking``, ``parse_tool_calls``) is
read off the trainer module itself, so it is the code the trainer really runs.
"""

from __future__ import annotations

import importlib
from types import ModuleType

TRAINER_MODULES = ("grpo_tui.worker.engine.trainer", "grpo_tui.worker.trainer")


def trainer_module() -> ModuleType:
    for name in TRAINER_MODULES:
        try:
            return importlib.import_module(name)
        except ModuleNotFoundError as exc:
            # Only "this layout does not exist" moves on; a broken import inside the engine is an error.
            if exc.name is None or not name.startswith(exc.name):
                raise
    raise ModuleNotFoundError(f"no trainer module among {TRAINER_MODULES}")


def Trainer(*args, **kwargs):  # noqa: N802 - reads like the class it builds
    return trainer_module().Trainer(*args, **kwargs)


def rollout() -> ModuleType:
    return trainer_module().rollout


def data() -> ModuleType:
    return trainer_module().data


def split_thinking(text: str):
    return trainer_module().split_thinking(text)


def parse_tool_calls(text: str):
    return trainer_module().parse_tool_calls(text)
