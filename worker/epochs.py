"""The run's epochs as the frames say them: ``epoch_start`` with the epoch's steps, ``epoch_end``
with its mean loss and reward (a resumed epoch counts the steps it had before the resume too)."""

from __future__ import annotations

import time

from grpo_tui.protocol import messages as m
from grpo_tui.protocol.messages import mean_of
from grpo_tui.worker.context import RunContext


class Epochs:
    def __init__(self, run: RunContext) -> None:
        self.run = run
        self.metrics: list[tuple[float | None, float | None]] = []  # (loss, reward) of the epoch's steps
        self.started = time.time()

    def start(self, epoch: int, step_in_epoch: int) -> None:
        trainer = self.run.trainer
        steps = min(trainer.steps_per_epoch, trainer.total_steps - epoch * trainer.steps_per_epoch)
        if step_in_epoch == 1:
            self.metrics = []
        self.started = time.time()
        self.run.emit(m.EpochStart(epoch=epoch, total_epochs=trainer.num_epochs, steps_in_epoch=steps))

    def add(self, step: m.Step) -> None:
        self.metrics.append((step.loss, step.reward))

    def end(self, epoch: int) -> None:
        self.run.emit(m.EpochEnd(epoch=epoch, mean_loss=mean_of([loss for loss, _ in self.metrics]),
                                 mean_reward=mean_of([reward for _, reward in self.metrics]),
                                 seconds=time.time() - self.started))
