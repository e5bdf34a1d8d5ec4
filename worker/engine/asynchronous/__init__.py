"""Asynchronous GRPO ([async], docs/async.md): a generator process rolls out and scores the next
steps while the learner trains, over an ``mx.distributed`` ring of two ranks (``wire``): the
learner's side (``learner_side``) and the generator's (``generator``)."""

from grpo_tui.worker.engine.asynchronous.learner_side import start

__all__ = ["start"]
