"""The training run inside the worker: the epoch loop, from the output folder's lock to the
``complete`` frame, with its collaborators: ``start`` (start and resume), ``checkpoint_policy``
(when to save), ``evaluation`` (the held-out evals), ``nan_stop`` (the NaN emergency) and
``silent_steps`` (steps without a learning signal). They
share one ``context.RunContext``.

Every MLX call (loading, the training step, saving) runs on one dedicated thread so the asyncio
loop stays free for commands, frames and the store; ``main.StdinAndSignals`` feeds the stdin commands, EOF
and signals into the loop (docs/architecture.md, "Processes", "Checkpoints"). No MLX
is imported here: the engine comes in on the MLX thread, where the trainer is built. ``main.StdinAndSignals``
reaches the loop only through its command interface (``command``, ``refuse``, ``input_closed``,
``signalled``, ``abandon``).
"""

from __future__ import annotations

import asyncio
import os
import random
import threading
import time
from collections.abc import Sequence
from typing import Literal

from grpo_tui.common import disk_space
from grpo_tui.protocol import messages as m
from grpo_tui.protocol.config import Config
from grpo_tui.protocol.control import STEP_BARRIER_ENV
from grpo_tui.protocol.outcome import Exit, Mistake
from grpo_tui.worker import leftover_processes, ranks
from grpo_tui.worker.checkpoint_policy import CheckpointPolicy
from grpo_tui.worker.command_state import CommandState, choose_samples
from grpo_tui.worker.context import RunContext
from grpo_tui.worker.doctor_watch import DoctorWatch
from grpo_tui.worker.epochs import Epochs
from grpo_tui.worker.failure import end_badly
from grpo_tui.worker.evaluation import due, run_eval
from grpo_tui.worker.frames import Emitter
from grpo_tui.worker.live_settings import LiveChanges
from grpo_tui.worker.mlx_thread import TrainerFactory, engine_trainer, release_mlx_streams
from grpo_tui.worker.nan_stop import NanStop
from grpo_tui.worker.trainer_contract import StepOutput
from grpo_tui.worker.silent_steps import SilentSteps
from grpo_tui.worker.start import RunStart
from grpo_tui.worker.trackers import Trackers, check_installed


class TrainingLoop:
    """One run of the worker: start, the steps epoch by epoch, the end or the crash."""

    def __init__(self, config: Config, emitter: Emitter, plain: bool = False,
                 make_trainer: TrainerFactory = engine_trainer, config_path: str = "config.toml",
                 overrides: Sequence[str] = ()) -> None:
        self.run_context = run = RunContext(config, emitter, config_path, overrides)
        self.config = config
        self.emitter = emitter
        self.plain = plain
        self.control: CommandState = run.control
        self.wake = asyncio.Event()
        self.exit_code: int = Exit.DONE  # how a run that does not complete ends (a stop, a NaN stop)
        self.started = time.time()
        self.first_step = 0  # the step this worker started from (a resume's)
        self.leader = ranks.is_leader()  # only rank 0 touches the output folder (ranks.py)
        self.distributed = ranks.data_parallel(config)
        self.checkpoints = CheckpointPolicy(run, self.leader)
        self.nan = NanStop(run, self.checkpoints)
        self.silent = SilentSteps(run)
        self.doctor = DoctorWatch(run)  # the run doctor's findings after every step (docs/doctor.md)
        self.live = LiveChanges(run)  # set_setting: checked on arrival, applied at a step boundary
        self.starter = RunStart(run, self.checkpoints, make_trainer, self.leader, self.distributed, self.live)
        self.epochs = Epochs(run)
        self.trackers: Trackers | None = None  # [logging] report_to, rank 0 only
        # GRPOTrainer with callbacks: after each step, its evaluations and checkpoint, the run says
        # ``step_barrier`` and waits for resume (or stop) from its follower, so a callback's verdict
        # (on_step_end's or on_evaluate's should_training_stop, trainer.set) lands before the next step
        self.step_barrier = self.leader and os.environ.get(STEP_BARRIER_ENV) == "1"
        self.barrier_owed: int | None = None  # the step whose barrier the next boundary holds

    @property
    def step(self) -> int:
        """The last completed step."""
        return self.control.step

    # ------------------------------------------------------------ the command interface (main.StdinAndSignals)

    def command(self, command: m.Command | str) -> None:
        """A stdin line: a command, answered now and acted on at the next step boundary (a live
        change is checked now, applied there); a string, a plain line that is no command, said."""
        if isinstance(command, str):
            self.run_context.log("warning", command)
            return
        answers = self.live.request(command) if isinstance(command, m.SetSetting) else self.control.handle(command)
        for event in answers:
            self.run_context.emit(event)
        self.wake.set()

    def refuse(self, message: str) -> None:
        """A line that does not decode: said, never fatal."""
        self.run_context.emit(m.Error(message=message, fatal=False))

    def input_closed(self) -> None:
        """EOF on stdin: the supervisor is gone; save a checkpoint and exit (a plain run ignores it)."""
        if self.plain:  # nobody drives a plain run through stdin; /dev/null must not stop it
            return
        if self.control.stop_reason is None:
            self.run_context.log("warning", "stdin closed (the dashboard is gone): saving a checkpoint and exiting")
        self.control.stop("eof")
        self.wake.set()

    def signalled(self, name: str) -> bool:
        """SIGTERM, SIGINT or SIGHUP: True when the worker must exit now (``abandon``), else it
        stops after the running step. Every completed step is kept: the running step finishes and a
        checkpoint that ``resume = "latest"`` picks is saved, unless nothing was completed since the
        last one (or the model is still loading), or this is the second signal."""
        busy = self.control.stepping or self.run_context.loaded is None  # a step, or loading: can't interrupt MLX
        nothing_new = self.run_context.loaded is None or self.checkpoints.steps_since() == 0
        insisted = self.control.stop_reason == "signal"
        self.exit_code = Exit.STOPPED
        # With several ranks, mlx.launch's SIGTERM often means "a peer died": the running step's
        # next collective fails at once, and the crash path names the lost rank and saves.
        if busy and (nothing_new or insisted) and not ranks.launched():
            self.run_context.log("warning", f"{name}: exiting now; " + (
                "a second signal: the running step is dropped" if insisted
                else "every completed step is in the latest checkpoint"))
            return True
        self.run_context.log("warning", f"{name}: stopping {'after the running step' if self.control.stepping else 'now'}")
        self.control.stop("signal")
        self.wake.set()
        return False

    async def abandon(self) -> None:
        """Exit without waiting for the MLX thread; the store never saw the unfinished step."""
        await self.finish_store("stopped")
        self.run_context.emit(m.Complete(total_steps=self.control.step, seconds=time.time() - self.started, status="stopped"))
        leftover_processes.end_and_say(self.run_context.log)
        self.emitter.close()
        os._exit(self.exit_code)

    async def finish_store(self, status: str) -> None:
        run = self.run_context
        if run.store is not None:
            await run.store.finish_run(run.run_id, status)

    # ------------------------------------------------------------ the run

    async def run(self) -> int:
        """The run, and its exit code (``protocol/outcome.py``)."""
        run = self.run_context
        try:
            if self.leader:
                check_installed(self.config)  # before the model loads: a missing tracker is a mistake
            await self.starter.start()
            if self.leader:  # after start: a resumed run continues its tracker run
                self.trackers = Trackers(self.config, run.output_dir, resumed=self.step > 0,
                                         warn=lambda message: self.run_context.log("warning", message))
                self.trackers.set_total(run.trainer.total_steps)
                self.trackers.resumed(self.step, self.starter.tokens_seen)
            self.epochs.metrics = self.starter.epoch_metrics
            return await self._train()
        except Mistake as exc:  # the user's to fix: one sentence, never restarted
            return await self._end_badly(exc, mistake=True)
        except Exception as exc:  # noqa: BLE001 - anything else is a crash, reported once
            if disk_space.is_full(exc, run.output_dir):  # a store, log or state write that did not fit
                sqlite = "database or disk is full" in str(exc) and run.store is not None
                written = run.store.path if sqlite and run.store is not None else getattr(exc, "filename", None)
                full = disk_space.DiskFull(disk_space.full_sentence(written or run.output_dir, "the store" if sqlite else ""))
                return await self._end_badly(full, mistake=True)
            return await self._end_badly(exc, mistake=False)
        finally:
            if self.trackers is not None:
                self.trackers.close()
            if run.store is not None:
                await run.store.close()
            if run.loaded is not None:
                await run.mlx(run.loaded.close)
            await run.mlx(release_mlx_streams)
            run.executor.shutdown(wait=True)

    async def _train(self) -> int:
        trainer = self.run_context.trainer
        self.first_step = self.step
        if self.step >= trainer.total_steps:
            self.run_context.log("info", f"the run is already complete ({self.step} steps); set checkpoint.resume = false to restart")
        first = True
        if self.step == 0:
            await self._maybe_eval(0)
        while self.step < trainer.total_steps:  # a live change of training.max_steps moves the end
            changes = await self._between_steps()
            stopping = self.control.stop_reason is not None
            if self.distributed:  # every rank takes rank 0's decision (go, and its live changes) at the same boundary
                # (a stop or a change that lands during this collective waits for the next boundary)
                agreed = await self.run_context.mlx(trainer.leader_value, int(not stopping) + 2 * bool(changes))
                stopping = not agreed & 1
                if agreed & 2:
                    payload = await self.run_context.mlx(trainer.leader_bytes, self.live.encode(changes))
                    if not self.leader:
                        await self.live.follow_leader(payload)
                if stopping:
                    self.control.stop(self.control.stop_reason or "stop")
            if stopping or self.step >= trainer.total_steps:
                break
            await self._run_step(self.step + 1, first)
            first = False
        self.control.pause_requested = False  # nothing left to pause; a requested save still happens
        await self._between_steps()
        return await self._finish()

    async def _between_steps(self, live: bool = True) -> list[m.SettingChanged]:
        """Apply the live changes due (``live``: not between an evaluation's batches), handle a
        requested save and pause; while paused, wait for resume or stop. The changes applied."""
        changes: list[m.SettingChanged] = []
        while True:
            self.wake.clear()  # before the flags are read: a command that comes during an await below wakes the wait
            if live and self.leader:
                changes += await self._apply_changes()
            if self.control.save_requested:
                self.control.save_requested = False
                await self.checkpoints.save("manual")
            if self.control.stop_reason is not None:
                return changes
            if live and self.barrier_owed is not None:  # paused before it is said: the answer may come at once
                self.control.paused = True
                self.run_context.emit(m.StepBarrier(step=self.barrier_owed))
                self.barrier_owed = None
            if self.control.take_pause():
                self.run_context.emit(m.Paused(step=self.step))
                self.run_context.emit(m.Status(phase="idle", message="paused"))
            if not self.control.paused:
                return changes
            await self.wake.wait()

    async def _apply_changes(self) -> list[m.SettingChanged]:
        changes = await self.live.apply_due()
        if changes and self.trackers is not None:
            self.trackers.set_total(self.run_context.trainer.total_steps)
            for change in changes:
                self.trackers.setting_changed(change)
        return changes

    def _on_phase(self, phase: m.Phase) -> None:
        self.run_context.phase = phase
        self.run_context.emit(m.Status(phase=phase, message=f"step {self.step + 1}"))

    def _phase_from_mlx_thread(self, loop: asyncio.AbstractEventLoop, phase: m.Phase) -> None:
        """The MLX thread waits until the phase is in run.jsonl: user code (a reward, a tool) that
        kills the process right after must not leave the previous phase as the last word, which
        is what a crash report names."""
        said = threading.Event()

        def emit() -> None:
            self._on_phase(phase)
            said.set()

        loop.call_soon_threadsafe(emit)
        said.wait(timeout=5)  # the asyncio loop only awaits this thread; never stall a step on it

    async def _run_step(self, step: int, first: bool) -> None:
        run = self.run_context
        trainer = run.trainer
        epoch, step_in_epoch = run.position(step)  # the step's own batch is the trainer's to build
        if step_in_epoch == 1 or first:
            self.epochs.start(epoch, step_in_epoch)
        loop = asyncio.get_running_loop()
        self.control.stepping = True
        try:
            output: StepOutput = await run.mlx(
                trainer.train_step, step, lambda p: self._phase_from_mlx_thread(loop, p)
            )
        finally:
            self.control.stepping = False
        self.control.step = step
        run.phase = "idle"
        if self.step_barrier:  # held at the next boundary, once the step's evaluation is done too
            self.barrier_owed = step
        if run.store is not None:
            await run.store.write_step(run.run_id, output)
        self.run_context.emit(output.metrics)
        if self.trackers is not None:
            self.trackers.step(output)
        rng = random.Random(f"{self.config.training.seed}:{step}")
        for gen in choose_samples(output.generations, self.control.display, rng):
            self.run_context.emit(gen.to_sample(step, self.config.grpo.group_size, self.control.display))
        self.epochs.add(output.metrics)
        await self._maybe_eval(step)  # before the step's checkpoint: a kill mid-eval replays both
        if await self.nan.after_step(output.metrics):
            self.exit_code = Exit.NAN_STOP
        elif self.leader and self.silent.after_step(output.metrics):
            self.exit_code = self.silent.exit_code
        if self.leader and await self.doctor.after_step(output, self.trackers) and self.exit_code == Exit.DONE:
            self.exit_code = Exit.DOCTOR
        await self.checkpoints.after_step()
        if step_in_epoch == trainer.steps_per_epoch or step == trainer.total_steps:
            self.epochs.end(epoch)

    async def _maybe_eval(self, step: int) -> None:
        run, e = self.run_context, self.config.eval
        if e is None or not due(step, run.trainer.total_steps, e.every, e.at_start, e.at_end):
            return
        for result in await run_eval(run, step, self._hold_in_eval) or []:
            if run.store is not None:
                await run.store.write_eval(run.run_id, result)
            self.run_context.emit(result)
            self.doctor.evaluated(result)
            if self.trackers is not None:
                self.trackers.eval(result)

    async def _hold_in_eval(self) -> None:
        await self._between_steps(live=False)  # a change waits for the end of the evaluation

    # ------------------------------------------------------------ the end

    async def _finish(self) -> int:
        completed = self.step >= self.run_context.trainer.total_steps and self.control.stop_reason != "nan"
        completed = completed or (self.control.stop_reason == "silent" and self.silent.solved)  # solved: done
        reason = None if completed else self.control.stop_reason
        await self.checkpoints.at_end(reason)
        status: Literal["completed", "stopped"] = "completed" if completed else "stopped"
        await self.finish_store(status)
        trained = self.step - self.first_step
        self.run_context.emit(m.Complete(total_steps=self.step, seconds=time.time() - self.started, status=status,
                                         trained=trained))
        if completed:
            return Exit.DONE
        # a user's stop, EOF or a signal; a NaN stop and a silent stop say their own
        return self.exit_code if reason in ("nan", "silent", "doctor") else Exit.STOPPED

    async def _end_badly(self, exc: Exception, *, mistake: bool) -> int:
        return await end_badly(self.run_context, self.checkpoints, exc, mistake=mistake, leader=self.leader,
                               distributed=self.distributed)
