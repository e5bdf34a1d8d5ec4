"""The real Trainer with injected faults, for worker tests that need a model to misbehave on cue.

Selected with ``GRPO_TUI_TRAINER=tests/fake_trainer.py:FaultyTrainer`` (a test-only hook of the
worker). Everything is the real engine except:

- ``FAKE_SKIP_STEPS=3,4,5``: those steps report a non-finite loss and skip the update (as the
  engine's NaN guard does), without touching the weights;
- ``FAKE_TOOL_CALLS=1``: every completion also carries one parsed ``<tool_call>``, as if the
  model had written one (a tiny random model will not).
"""

from __future__ import annotations

import os

from grpo_tui.protocol.messages import Step, ToolCall
from grpo_tui.worker.records import StepOutput
from grpo_tui.worker.trainer import Trainer


def _steps(name: str) -> set[int]:
    return {int(s) for s in os.environ.get(name, "").split(",") if s.strip()}


class FaultyTrainer(Trainer):
    def train_step(self, step, on_phase=lambda p: None):  # type: ignore[no-untyped-def]
        if step in _steps("FAKE_SKIP_STEPS"):
            epoch = self.batch(step)[0]
            metrics = Step(step=step, epoch=epoch, loss=None, gradients_applied=False, skipped_reason="non-finite loss")
            return StepOutput(metrics=metrics, generations=[])
        output = super().train_step(step, on_phase)
        if os.environ.get("FAKE_TOOL_CALLS"):
            for i, gen in enumerate(output.generations):
                raw = f'{{"name": "add", "arguments": {{"a": {i}, "b": {step}}}}}'
                gen.tool_calls = [ToolCall(index=0, name="add", arguments={"a": i, "b": step}, raw=raw)]
        return output
