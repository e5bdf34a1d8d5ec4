"""``GRPOTrainer(callbacks=[...])``: transformers' ``TrainerCallback`` events, from the worker's frames.

Each callback (a ``transformers.TrainerCallback`` subclass, or any object with some of its methods)
is called as transformers' ``CallbackHandler`` calls it: ``on_<event>(args, state, control,
**kwargs)``; a returned ``TrainerControl`` replaces ``control``. The events: ``on_init_end``,
``on_train_begin``, ``on_epoch_begin``, ``on_step_begin``, ``on_step_end``, ``on_log`` (``logs=``),
``on_evaluate`` (``metrics=``), ``on_save``, ``on_epoch_end``, ``on_train_end``. After
``on_step_end``, ``control.should_training_stop`` ends the run after that step (with a
checkpoint), ``control.should_save`` saves one; the worker waits for that answer before its next
step (``protocol/control.STEP_BARRIER_ENV``).
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Sequence
from typing import Any

EVENTS = ("on_init_end", "on_train_begin", "on_epoch_begin", "on_step_begin", "on_substep_end", "on_step_end",
          "on_pre_optimizer_step", "on_optimizer_step", "on_log", "on_evaluate", "on_predict", "on_save",
          "on_epoch_end", "on_train_end", "on_prediction_step")


@dataclasses.dataclass
class TrainerControl:
    """transformers' ``TrainerControl``: what callbacks ask of the run."""

    should_training_stop: bool = False
    should_epoch_stop: bool = False
    should_save: bool = False
    should_evaluate: bool = False
    should_log: bool = False

    def _new_training(self) -> None:
        self.should_training_stop = False

    def _new_epoch(self) -> None:
        self.should_epoch_stop = False

    def _new_step(self) -> None:
        self.should_save = False
        self.should_evaluate = False
        self.should_log = False


class CallbackHandler:
    """Calls every callback's ``on_<event>`` with the trainer's ``args``, ``state`` and ``control``."""

    def __init__(self, callbacks: Sequence[Any], trainer: Any) -> None:
        self.callbacks = [c() if isinstance(c, type) else c for c in callbacks]  # transformers takes classes too
        for callback in self.callbacks:
            if not any(callable(getattr(callback, name, None)) for name in EVENTS):
                from grpo_tui.errors import TrainingError

                raise TrainingError(f"callbacks: {type(callback).__name__} has none of TrainerCallback's methods "
                                    "(on_step_end, on_log, ...)")
        self.trainer = trainer
        self.control = TrainerControl()

    def __bool__(self) -> bool:
        return bool(self.callbacks)

    def call(self, event: str, **kwargs: Any) -> TrainerControl:
        trainer = self.trainer
        extra = {"model": trainer.model, "processing_class": trainer.processing_class, "optimizer": None,
                 "lr_scheduler": None, "train_dataloader": None, "eval_dataloader": None, "trainer": trainer}
        for callback in self.callbacks:
            method = getattr(callback, event, None)
            if method is None:
                continue
            given = {**extra, **kwargs}
            result = method(trainer.args, trainer.state, self.control, **_taken(method, given))
            if isinstance(result, TrainerControl) or (result is not None and hasattr(result, "should_training_stop")):
                self.control = result
        return self.control


def _taken(method: Any, kwargs: dict[str, Any]) -> dict[str, Any]:
    """The keyword arguments ``method`` takes (transformers' methods take ``**kwargs``; a plain
    ``on_step_end(self, args, state, control, trainer)`` takes ``trainer`` only)."""
    try:
        params = inspect.signature(method).parameters.values()
    except (TypeError, ValueError):
        return kwargs
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return kwargs
    names = {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    return {k: v for k, v in kwargs.items() if k in names}


__all__ = ["CallbackHandler", "EVENTS", "TrainerControl"]
