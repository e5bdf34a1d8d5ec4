"""The one place these tests import the MLX engine from: the trainer, the rollout and the data
modules, and the parsers the step's stored generations are built with (``step_output`` imports them
from ``parsing``), so the tests check the code the trainer really runs."""

from __future__ import annotations

from types import ModuleType

from grpo_tui.worker.engine.prompts import data as _data
from grpo_tui.worker.engine.policy import rollout as _rollout
from grpo_tui.worker.engine import step_output
from grpo_tui.worker.engine import trainer as _trainer


def trainer_module() -> ModuleType:
    return _trainer


def Trainer(*args, **kwargs):  # noqa: N802 - reads like the class it builds
    return _trainer.MlxTrainer(*args, **kwargs)


def rollout() -> ModuleType:
    return _rollout


def data() -> ModuleType:
    return _data


def split_thinking(text: str):
    return step_output.split_thinking(text)


def parse_tool_calls(text: str):
    return step_output.parse_tool_calls(text)
