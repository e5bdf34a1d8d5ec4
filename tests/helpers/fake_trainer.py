"""The real MlxTrainer with injected non-finite steps, for worker tests of the NaN guard's aftermath.

Selected with ``tests.helpers.trainer_env.fake_trainer_env(FAULTY_TRAINER)`` (it loads through
tests/helpers/trainer_hook, outside the product). Everything is the real engine except that the steps listed in ``FAKE_SKIP_STEPS=3,4,5``
report a non-finite loss and skip the update (as the engine's NaN guard does), without touching
the weights. A tiny model cannot be made to produce NaN on cue.
"""

from __future__ import annotations

import os

from grpo_tui.protocol.messages import Step
from grpo_tui.worker.trainer_contract import StepOutput
from grpo_tui.worker.engine.trainer import MlxTrainer


def _steps(name: str) -> set[int]:
    return {int(s) for s in os.environ.get(name, "").split(",") if s.strip()}


class FaultyTrainer(MlxTrainer):
    def train_step(self, step, on_phase=lambda p: None):  # type: ignore[no-untyped-def]
        if step in _steps("FAKE_SKIP_STEPS"):
            epoch = self.batch(step)[0]
            metrics = Step(step=step, epoch=epoch, loss=None, gradients_applied=False, skipped_reason="non-finite loss")
            return StepOutput(metrics=metrics, generations=[])
        return super().train_step(step, on_phase)
