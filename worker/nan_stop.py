"""The NaN emergency: after ``training.nan_patience`` skipped updates in a row, save an emergency
checkpoint, keep a copy of the last good one, and stop the run with ``Exit.NAN_STOP`` (not a crash: no restart; more steps at
this learning rate would only fail again). With ``training.on_nonfinite = "checkpoint"`` the first skipped update of
each streak saves the emergency checkpoint (a skipped update leaves the weights as the last finite step made them)
and the run goes on; it still stops once ``CHECKPOINT_MODE_FACTOR * nan_patience`` updates in a row were skipped.
docs/architecture.md, "Checkpoints"; docs/config.md, ``on_nonfinite``.
"""

from __future__ import annotations

from pathlib import Path

from grpo_tui.protocol import messages as m
from grpo_tui.protocol.layout import last_good_dir_name
from grpo_tui.protocol.outcome import Exit
from grpo_tui.worker import checkpoint_files as ckpt
from grpo_tui.worker.checkpoint_policy import CheckpointPolicy
from grpo_tui.worker.context import RunContext

# In "checkpoint" mode a run whose updates keep failing still ends: after this many times nan_patience in a row.
CHECKPOINT_MODE_FACTOR = 10


class NanStop:
    """Counts the skipped updates in a row and stops the run when they reach the patience."""

    def __init__(self, run: RunContext, checkpoints: CheckpointPolicy) -> None:
        self.run = run
        self.checkpoints = checkpoints
        self.streak = 0
        self.saved: Path | None = None  # "checkpoint" mode: this run's newest emergency save

    @property
    def limit(self) -> int:
        """Skipped updates in a row that stop the run."""
        training = self.run.config.training
        return training.nan_patience * (CHECKPOINT_MODE_FACTOR if training.on_nonfinite == "checkpoint" else 1)

    async def after_step(self, metrics: m.Step) -> bool:
        """Count ``metrics``' update; True when the run stopped here."""
        if metrics.gradients_applied:
            self.streak = 0
            return False
        self.streak += 1
        self.run.log("warning", f"step {metrics.step}: update skipped ({metrics.skipped_reason}), {self.streak} in a row")
        checkpoint_mode = self.run.config.training.on_nonfinite == "checkpoint"
        if checkpoint_mode and self.streak == 1:
            await self._save_and_go_on(metrics.step)
        if self.streak != self.limit:
            return False
        await self._emergency(self.saved if checkpoint_mode else None)
        return True

    async def _save_and_go_on(self, step: int) -> None:
        """Save the last finite weights as ``emergency-<step>`` (replacing this run's previous one) and go on."""
        run, previous = self.run, self.saved
        self.saved = await self.checkpoints.save("emergency", reason="nan")
        if previous is not None and previous != self.saved:
            await run.mlx(ckpt.remove_checkpoint, previous)
        run.log("warning", f"step {step}: non-finite loss or gradient, update skipped; saved the last finite weights as "
                           f"{self.saved} (training.on_nonfinite = \"checkpoint\") and going on; the run stops after "
                           f"{self.limit} such steps in a row")

    async def _emergency(self, saved: Path | None) -> None:
        run = self.run
        good = self.checkpoints.last_good
        path = saved or await self.checkpoints.save("emergency", reason="nan")
        copy = None
        if good is not None and good[1].exists():
            copy = await run.mlx(ckpt.copy_checkpoint, good[1], run.output_dir, last_good_dir_name(good[0]))
        message = ckpt.nan_stop_message(self.streak, path, copy, run.config.training.learning_rate, run.config_path)
        run.log("error", message)
        run.emit(m.Error(message=message, fatal=True, exit_code=Exit.NAN_STOP, log_path=str(run.emitter.jsonl_path)))
        run.control.stop("nan")
