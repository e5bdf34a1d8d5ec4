"""When the run saves a checkpoint and what it remembers of them: periodic saves and their
pruning, a requested save, the final save, and an emergency save at a stop or a crash
(docs/architecture.md, "Checkpoints"). The files themselves are ``checkpoint``'s.
"""

from __future__ import annotations

from pathlib import Path

from grpo_tui.protocol import messages as m
from grpo_tui.protocol.layout import checkpoint_dir_name
from grpo_tui.worker import checkpoint_files as ckpt
from grpo_tui.worker.command_state import StopReason
from grpo_tui.worker.context import RunContext


class CheckpointPolicy:
    """Saves for one run; only rank 0 writes (ranks.py)."""

    def __init__(self, run: RunContext, leader: bool) -> None:
        self.run = run
        self.leader = leader
        self.last: tuple[int, Path] | None = None  # (step, path) of the newest checkpoint saved
        self.last_good: tuple[int, Path] | None = None  # ... or resumed from, not an emergency one

    def resumed(self, step: int, path: Path, emergency: bool) -> None:
        """The run starts from the checkpoint at ``path`` (an emergency one is not a good one)."""
        self.last = (step, path)
        self.last_good = None if emergency else (step, path)

    def steps_since(self) -> int:
        """Steps done since the newest checkpoint (what a stop now would lose)."""
        return self.run.step - (self.last[0] if self.last else 0)

    async def after_step(self) -> None:
        """The periodic save (``checkpoint.save_every``); a requested save at that step is it."""
        run = self.run
        every = run.config.checkpoint.save_every
        if run.control.stop_reason == "nan":  # the NaN stop saved its emergency one; latest must not pick these weights
            return
        if every and run.step % every == 0 and run.step < run.trainer.total_steps:
            kind: m.CheckpointKind = "manual" if run.control.save_requested else "periodic"
            run.control.save_requested = False
            await self.save(kind)

    async def at_end(self, reason: StopReason | None) -> None:
        """The last save: ``final`` when the run completed or was stopped (``STOP``); after a
        signal, stdin's EOF or a silent stop, ``checkpoint-<step>`` when a step was completed since
        the last save: every clean stop leaves a checkpoint ``resume = "latest"`` picks. A NaN stop
        already saved its emergency checkpoint."""
        run = self.run
        if reason in (None, "stop"):
            if not (self.last and self.last == (run.step, run.output_dir / "final")):
                await self.save("final")
        elif reason != "nan" and self.steps_since() > 0:
            await self.save("periodic")

    async def save(self, kind: m.CheckpointKind, reason: str = "") -> Path:
        run = self.run
        trainer, step = run.trainer, run.step
        name = checkpoint_dir_name(kind, step)
        if not self.leader:  # one writer: rank 0 saves the (identical) weights once
            return run.output_dir / name
        epoch, step_in_epoch = run.position(step)
        done = [i for s in range(step - step_in_epoch + 1, step + 1) for i in trainer.batch(s)[2]] if step else []
        state = ckpt.TrainingState(
            step=step, epoch=epoch, step_in_epoch=step_in_epoch, kind=kind, run_id=run.run_id,
            seed=run.config.training.seed, dataset_size=trainer.dataset_size, dataset_hash=trainer.dataset_hash,
            config_digest=ckpt.config_digest(run.config), total_steps=trainer.total_steps, epoch_indices_done=done,
            reason=reason, model=run.model_identity, live_changes=list(run.live_changes), config=run.config.to_dict(),
        )  # fmt: skip
        run.emit(m.Status(phase="saving", message=f"saving {name}"))
        path = await run.mlx(ckpt.save_checkpoint, trainer, run.output_dir, name, state)
        if kind == "periodic":
            for old in await run.mlx(ckpt.prune, run.output_dir, run.config.checkpoint.keep_last):
                run.log("debug", f"pruned {old.name}")
        if kind != "emergency":
            self.last = self.last_good = (step, path)
        if run.store is not None:
            await run.store.flush_logs(run.run_id)
        run.emit(m.Checkpoint(path=str(path), step=step, kind=kind))
        run.emit(m.Status(phase="idle", message=f"saved {name}"))
        return path
