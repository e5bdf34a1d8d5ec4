"""The NaN emergency: after ``training.nan_patience`` skipped updates in a row, save an emergency
checkpoint, keep a copy of the last good one, and stop the run with ``Exit.NAN_STOP`` (not a crash: no restart; more steps at
this learning rate would only fail again). docs/architecture.md, "Checkpoints".
"""

from __future__ import annotations

from grpo_tui.protocol import messages as m
from grpo_tui.protocol.layout import last_good_dir_name
from grpo_tui.protocol.outcome import Exit
from grpo_tui.worker import checkpoint_files as ckpt
from grpo_tui.worker.checkpoint_policy import CheckpointPolicy
from grpo_tui.worker.context import RunContext

class NanStop:
    """Counts the skipped updates in a row and stops the run when they reach the patience."""

    def __init__(self, run: RunContext, checkpoints: CheckpointPolicy) -> None:
        self.run = run
        self.checkpoints = checkpoints
        self.streak = 0

    async def after_step(self, metrics: m.Step) -> bool:
        """Count ``metrics``' update; True when the run stopped here."""
        if metrics.gradients_applied:
            self.streak = 0
            return False
        self.streak += 1
        self.run.log("warning", f"step {metrics.step}: update skipped ({metrics.skipped_reason}), {self.streak} in a row")
        if self.streak != self.run.config.training.nan_patience:
            return False
        await self._emergency()
        return True

    async def _emergency(self) -> None:
        run = self.run
        good = self.checkpoints.last_good
        path = await self.checkpoints.save("emergency", reason="nan")
        copy = None
        if good is not None and good[1].exists():
            copy = await run.mlx(ckpt.copy_checkpoint, good[1], run.output_dir, last_good_dir_name(good[0]))
        message = ckpt.nan_stop_message(self.streak, path, copy, run.config.training.learning_rate, run.config_path)
        run.log("error", message)
        run.emit(m.Error(message=message, fatal=True, exit_code=Exit.NAN_STOP, log_path=str(run.emitter.jsonl_path)))
        run.control.stop("nan")
