"""The training run inside the worker: start or resume, the step loop, checkpoints, the end.

Every MLX call (loading, the training step, saving) runs on one dedicated thread so the asyncio
loop stays free for commands, frames and the store; ``main.Inputs`` feeds the stdin commands, EOF
and signals into the loop's ``control`` (docs/architecture.md, "Processes", "Checkpoints"). No MLX
is imported here: the engine comes in on the MLX thread, where the trainer is built.
"""

from __future__ import annotations

import asyncio
import random
import sys
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, Literal

from grpo_tui.protocol import messages as m
from grpo_tui.protocol.blas import active_blas
from grpo_tui.protocol.blas import describe as describe_blas
from grpo_tui.protocol.blas_warning import slow_blas_warning
from grpo_tui.protocol.config import Config
from grpo_tui.protocol.layout import RUN_LOG_FILE, checkpoint_dir_name, last_good_dir_name

from . import checkpoint as ckpt
from . import ranks
from .control import Control, choose_samples
from .evaluation import due, run_eval
from .frames import Emitter
from .mlx_thread import release_mlx_streams, trainer_class
from .records import StepOutput, Trainer
from .resume import find_resume
from .store import Store

NAN_EXIT = 3  # the exit status of a run stopped by non-finite steps (not a crash: no restart)
# A signal saves an emergency checkpoint only when more steps than this would be lost.
EMERGENCY_AFTER_STEPS = 3


class TrainingLoop:
    """One run of the worker, from the output folder's lock to the ``complete`` frame."""

    def __init__(self, config: Config, emitter: Emitter, plain: bool = False) -> None:
        self.config = config
        self.emitter = emitter
        self.plain = plain
        self.output_dir = Path(config.checkpoint.output_dir)
        self.control = Control(display=config.display.sample_display)
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="mlx")
        self.wake = asyncio.Event()
        self.loaded: Trainer | None = None  # the engine's trainer, once loaded
        self.store: Store | None = None
        self.run_id = 0
        self.last_ckpt: tuple[int, Path] | None = None  # (step, path) of the newest checkpoint saved
        self.last_good: tuple[int, Path] | None = None  # ... or resumed from, not an emergency one
        self.phase: str = "loading"
        self.nan_streak = 0
        self.exit_code = 0
        self.started = time.time()
        self.epoch_metrics: list[tuple[float | None, float | None]] = []
        self.epoch_started = time.time()
        self._lock: Any = None  # the output folder's lock file, held while the process lives
        self.leader = ranks.is_leader()  # only rank 0 touches the output folder (ranks.py)
        self.distributed = ranks.launched()

    # ------------------------------------------------------------ small helpers

    @property
    def trainer(self) -> Trainer:
        """The loaded trainer (every caller runs after ``_start`` loaded it)."""
        if self.loaded is None:
            raise RuntimeError("the trainer is not loaded yet")
        return self.loaded

    @property
    def step(self) -> int:
        return self.control.step

    def emit(self, event: m.Event) -> None:
        self.emitter.emit(event)

    def log(self, level: m.LogLevel, message: str) -> None:
        self.emitter.log(level, message)
        if self.store is not None:
            self.store.queue_log(self.step, level, message)

    async def mlx(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run on the MLX thread (MLX state stays on one thread)."""
        return await asyncio.get_running_loop().run_in_executor(self.executor, fn, *args)

    def steps_since_checkpoint(self) -> int:
        return self.step - (self.last_ckpt[0] if self.last_ckpt else 0)

    # ------------------------------------------------------------ the run

    async def run(self) -> int:
        try:
            if not await self._start():
                return 2
            return await self._train()
        except Exception as exc:  # noqa: BLE001 - anything else is a crash, reported once
            return await self._crash(exc)
        finally:
            if self.store is not None:
                await self.store.close()
            await self.mlx(release_mlx_streams)
            self.executor.shutdown(wait=True)

    # ------------------------------------------------------------ start and resume

    async def _start(self) -> bool:
        cfg = self.config
        if not self.leader:
            return await self._follow()
        self.emit(m.Status(phase="loading", message="preparing the output folder"))
        self._lock = ckpt.lock_output_dir(self.output_dir)
        if self._lock is None:
            self.emit(m.Error(message=f"another worker is already training in {self.output_dir}", fatal=True))
            return False
        resume = await find_resume(self.config, self.output_dir, self.mlx, self.log, self.emit)
        if resume is False:
            return False
        self.emitter.open_jsonl(self.output_dir / RUN_LOG_FILE)
        if cfg.store.enabled:
            # A checkpoint from another output folder belongs to another store: record a new run.
            ours = resume is not None and resume[0].parent.resolve() == self.output_dir.resolve()
            await self._open_store(resume[1] if resume is not None and ours else None)
        self.emit(m.Status(phase="loading", message=f"loading {cfg.model.path}"))
        main_loop = asyncio.get_running_loop()

        def log_from_thread(level: str, message: str) -> None:
            main_loop.call_soon_threadsafe(self.log, level, message)  # type: ignore[arg-type]

        self.loaded = trainer = await self.mlx(trainer_class(), cfg, log_from_thread)
        active = active_blas()  # verified in this process, not assumed from the config
        blas = describe_blas(active)
        self.log("info", f"BLAS: {blas}")
        if slow := slow_blas_warning(active):
            self.log("warning", slow)
        self.emitter.total_steps = trainer.total_steps
        if self.store is not None:
            await self.store.update_run(self.run_id, model=trainer.model_name, total_steps=trainer.total_steps)
        if resume is not None:
            await self._restore(*resume)
        if self.distributed:
            await self.mlx(trainer.sync_from_leader, self.step)
        self.emit(
            m.Init(
                model=trainer.model_name, model_path=cfg.model.path, config=resolved_config(cfg, blas),
                dataset_size=trainer.dataset_size, steps_per_epoch=trainer.steps_per_epoch,
                total_steps=trainer.total_steps, num_epochs=trainer.num_epochs, output_dir=str(self.output_dir),
                ranks=ranks.describe(trainer)[0], backend=ranks.describe(trainer)[1],
            )
        )  # fmt: skip
        return True

    async def _follow(self) -> bool:
        """A rank > 0 starts: no lock, store or run log; rank 0's weights and step."""
        self.loaded = trainer = await self.mlx(trainer_class(), self.config, lambda level, message: None)
        self.control.step = await self.mlx(trainer.sync_from_leader, 0)
        return True

    async def _open_store(self, state: ckpt.TrainingState | None) -> None:
        cfg = self.config
        self.store = store = await Store.open_in(self.output_dir)
        if await store.mark_abandoned_runs():
            self.log("info", "an earlier run in this store ended without finishing; marked crashed")
        if state is not None and await store.reopen_run(state.run_id, state.step, state.total_steps):
            self.run_id = state.run_id
        else:
            if state is not None:
                self.log("warning", f"run {state.run_id} is not in the store; recording a new run")
            model = Path(cfg.model.path).name
            self.run_id = await store.create_run(cfg.run_name, model, cfg.model.path, cfg.to_dict(), 0)
        self.emit(m.DatabasePath(path=str(store.path), run_id=self.run_id, run_name=cfg.run_name))

    async def _restore(self, path: Path, state: ckpt.TrainingState) -> None:
        trainer = self.trainer
        self.emit(m.Status(phase="loading", message=f"resuming from {path}"))
        await self.mlx(trainer.load_checkpoint, path)
        if self.store is None:
            self.run_id = state.run_id
        self.control.step = state.step
        self.last_ckpt = (state.step, path)
        self.last_good = (state.step, path) if state.kind != "emergency" else None
        if state.dataset_hash != trainer.dataset_hash or state.dataset_size != trainer.dataset_size:
            self.log(
                "warning",
                f"the dataset changed since {path.name} ({state.dataset_size} -> {trainer.dataset_size} rows); "
                "the data order after the resume differs from the original run",
            )
        if state.config_digest != ckpt.config_digest(self.config):
            self.log("info", f"training settings differ from those of {path.name}")
        history, aggregates = await self.store.history(self.run_id) if self.store else ([], m.Aggregates())
        epoch, step_in_epoch = self._position(state.step)
        self.epoch_metrics = [(h.loss, h.reward) for h in history if h.epoch == epoch and h.step <= state.step]
        self.emit(
            m.ResumeState(
                step=state.step, epoch=epoch, total_epochs=trainer.num_epochs, step_in_epoch=step_in_epoch,
                steps_per_epoch=trainer.steps_per_epoch, history=history, aggregates=aggregates,
            )
        )  # fmt: skip
        for done in await self.store.evals(self.run_id) if self.store else []:
            self.emit(done)  # the eval curve so far
        self.log("info", f"resumed from {path} at step {state.step}")

    def _position(self, step: int) -> tuple[int, int]:
        """(epoch, step_in_epoch) after ``step`` steps."""
        if step <= 0:
            return 0, 0
        epoch, step_in_epoch, _ = self.trainer.batch(step)
        return epoch, step_in_epoch

    # ------------------------------------------------------------ training loop

    async def _train(self) -> int:
        total = self.trainer.total_steps
        if self.step >= total:
            self.log("info", f"the run is already complete ({self.step} steps); set checkpoint.resume = false to restart")
        first = True
        if self.step == 0:
            await self._maybe_eval(0)
        while self.step < total:
            await self._between_steps()
            stopping = self.control.stop_reason is not None
            if self.distributed:  # every rank takes rank 0's decision at the same boundary
                # (a stop that lands during this collective waits for the next boundary)
                stopping = not await self.mlx(self.trainer.leader_value, int(not stopping))  # type: ignore[attr-defined]
                if stopping:
                    self.control.stop(self.control.stop_reason or "stop")
            if stopping:
                break
            await self._run_step(self.step + 1, first)
            first = False
        self.control.pause_requested = False  # nothing left to pause; a requested save still happens
        await self._between_steps()
        return await self._finish()

    async def _maybe_eval(self, step: int) -> None:
        e = self.config.eval
        if e is None or not due(step, self.trainer.total_steps, e.every, e.at_start, e.at_end):
            return
        result = await run_eval(self, step)
        if result is not None:
            if self.store is not None:
                await self.store.write_eval(self.run_id, result)
            self.emit(result)

    async def between_batches(self) -> None:
        """Between two batches of a long evaluation: the same as between steps."""
        await self._between_steps()

    async def _between_steps(self) -> None:
        """Handle a requested save and pause; while paused, wait for resume or stop."""
        while True:
            if self.control.save_requested:
                self.control.save_requested = False
                await self._checkpoint("manual")
            if self.control.stop_reason is not None:
                return
            if self.control.take_pause():
                self.emit(m.Paused(step=self.step))
                self.emit(m.Status(phase="idle", message="paused"))
            if not self.control.paused:
                return
            self.wake.clear()
            await self.wake.wait()

    def _on_phase(self, phase: str) -> None:
        self.phase = phase
        self.emit(m.Status(phase=phase, message=f"step {self.step + 1}"))  # type: ignore[arg-type]

    async def _run_step(self, step: int, first: bool) -> None:
        trainer = self.trainer
        epoch, step_in_epoch, _ = trainer.batch(step)
        if step_in_epoch == 1 or first:
            self._epoch_start(epoch, step_in_epoch)
        loop = asyncio.get_running_loop()
        self.control.stepping = True
        try:
            output: StepOutput = await self.mlx(
                trainer.train_step, step, lambda p: loop.call_soon_threadsafe(self._on_phase, p)
            )
        finally:
            self.control.stepping = False
        self.control.step = step
        self.phase = "idle"
        if self.store is not None:
            await self.store.write_step(self.run_id, output)
        self.emit(output.metrics)
        rng = random.Random(f"{self.config.training.seed}:{step}")
        for gen in choose_samples(output.generations, self.control.display, rng):
            self.emit(gen.to_sample(step, self.config.grpo.group_size))
        self.epoch_metrics.append((output.metrics.loss, output.metrics.reward))
        await self._maybe_eval(step)  # before the step's checkpoint: a kill mid-eval replays both
        await self._after_step(output)
        if step_in_epoch == trainer.steps_per_epoch or step == trainer.total_steps:
            self._epoch_end(epoch)

    def _epoch_start(self, epoch: int, step_in_epoch: int) -> None:
        trainer = self.trainer
        steps = min(trainer.steps_per_epoch, trainer.total_steps - epoch * trainer.steps_per_epoch)
        if step_in_epoch == 1:
            self.epoch_metrics = []
        self.epoch_started = time.time()
        self.emit(m.EpochStart(epoch=epoch, total_epochs=trainer.num_epochs, steps_in_epoch=steps))

    def _epoch_end(self, epoch: int) -> None:
        def mean(values: list[float | None]) -> float | None:
            kept = [v for v in values if v is not None and v == v]
            return sum(kept) / len(kept) if kept else None

        self.emit(
            m.EpochEnd(
                epoch=epoch,
                mean_loss=mean([loss for loss, _ in self.epoch_metrics]),
                mean_reward=mean([reward for _, reward in self.epoch_metrics]),
                seconds=time.time() - self.epoch_started,
            )
        )

    async def _after_step(self, output: StepOutput) -> None:
        metrics, cfg = output.metrics, self.config
        if metrics.gradients_applied:
            self.nan_streak = 0
        else:
            self.nan_streak += 1
            self.log("warning", f"step {metrics.step}: update skipped ({metrics.skipped_reason}), {self.nan_streak} in a row")
            if self.nan_streak == cfg.training.nan_patience:
                await self._nan_emergency()
        every = cfg.checkpoint.save_every
        if every and self.step % every == 0 and self.step < self.trainer.total_steps:
            kind: m.CheckpointKind = "manual" if self.control.save_requested else "periodic"
            self.control.save_requested = False
            await self._checkpoint(kind)

    async def _nan_emergency(self) -> None:
        """Save an emergency checkpoint, keep a copy of the last good one, and stop the run: more
        steps at this learning rate would only fail again."""
        good = self.last_good
        path = await self._checkpoint("emergency")
        copy = None
        if good is not None and good[1].exists():
            copy = await self.mlx(ckpt.copy_checkpoint, good[1], self.output_dir, last_good_dir_name(good[0]))
        lr = self.config.training.learning_rate
        message = ckpt.nan_stop_message(self.nan_streak, path, copy, lr)
        self.log("error", message)
        self.emit(m.Error(message=message, fatal=True))
        self.control.stop("nan")
        self.exit_code = NAN_EXIT

    # ------------------------------------------------------------ checkpoints and the end

    async def _checkpoint(self, kind: m.CheckpointKind) -> Path:
        trainer, step = self.trainer, self.step
        name = checkpoint_dir_name(kind, step)
        if not self.leader:  # one writer: rank 0 saves the (identical) weights once
            return self.output_dir / name
        epoch, step_in_epoch = self._position(step)
        done = [i for s in range(step - step_in_epoch + 1, step + 1) for i in trainer.batch(s)[2]] if step else []
        state = ckpt.TrainingState(
            step=step, epoch=epoch, step_in_epoch=step_in_epoch, kind=kind, run_id=self.run_id,
            seed=self.config.training.seed, dataset_size=trainer.dataset_size, dataset_hash=trainer.dataset_hash,
            config_digest=ckpt.config_digest(self.config), total_steps=trainer.total_steps, epoch_indices_done=done,
        )  # fmt: skip
        self.emit(m.Status(phase="saving", message=f"saving {name}"))
        path = await self.mlx(ckpt.save_checkpoint, trainer, self.output_dir, name, state)
        if kind == "periodic":
            for old in await self.mlx(ckpt.prune, self.output_dir, self.config.checkpoint.keep_last):
                self.log("debug", f"pruned {old.name}")
        if kind != "emergency":
            self.last_ckpt = self.last_good = (step, path)
        if self.store is not None:
            await self.store.flush_logs(self.run_id)
        self.emit(m.Checkpoint(path=str(path), step=step, kind=kind))
        self.emit(m.Status(phase="idle", message=f"saved {name}"))
        return path

    async def _finish(self) -> int:
        completed = self.step >= self.trainer.total_steps and self.control.stop_reason != "nan"
        reason = None if completed else self.control.stop_reason
        if reason in (None, "stop"):
            if not (self.last_ckpt and self.last_ckpt == (self.step, self.output_dir / "final")):
                await self._checkpoint("final")
        elif reason != "nan" and self.steps_since_checkpoint() > (EMERGENCY_AFTER_STEPS if reason == "signal" else 0):
            await self._checkpoint("emergency")
        status: Literal["completed", "stopped"] = "completed" if completed else "stopped"
        await self.finish_store(status)
        self.emit(m.Complete(total_steps=self.step, seconds=time.time() - self.started, status=status))
        return 0 if completed else self.exit_code

    async def finish_store(self, status: str) -> None:
        if self.store is not None:
            await self.store.finish_run(self.run_id, status)

    async def _crash(self, exc: Exception) -> int:
        # These say what is wrong in a sentence (a reward function, a tool, a config the model cannot
        # run with), naming it and the config key.
        message = (str(exc) if type(exc).__name__ in ("RewardError", "ToolError", "ConfigError")
                   else f"{type(exc).__name__}: {exc}")
        self.emit(m.Error(message=message, fatal=True, traceback=traceback.format_exc()))
        if not self.leader:  # its frames go nowhere (main.py); say it once where the launcher shows it
            print(f"rank {ranks.rank()}: {message}", file=sys.stderr, flush=True)
        if self.store is not None:
            self.store.queue_log(self.step, "error", message)
        try:
            # A step that failed before its update left the weights untouched: worth keeping.
            # So did a lost rank (every collective comes before the one update of a single pass).
            lost = type(exc).__name__ == "RankLost" and self.config.grpo.num_iterations == 1
            untouched = self.phase in ("generating", "scoring") or lost
            if self.loaded is not None and untouched and self.steps_since_checkpoint():
                await self._checkpoint("emergency")
            await self.finish_store("crashed")
        except Exception as inner:  # noqa: BLE001 - already crashing; say it, keep the first error
            self.emitter.log("error", f"while handling the crash: {type(inner).__name__}: {inner}")
        return 1


def resolved_config(cfg: Config, active_blas: str) -> dict[str, Any]:
    """The config as the worker runs it, plus what it found at start (shown in the Config tab)."""
    config = cfg.to_dict()
    config["runtime"]["active_blas"] = active_blas
    return config
