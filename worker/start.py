"""How a run starts: the output folder's lock, where it resumes from (``checkpoint.resume``:
``latest``, a path, or a fresh start with the old checkpoints set aside), the store's run, the
trainer's loading and the ``init`` frame; docs/architecture.md, "Processes", "Checkpoints".
"""

from __future__ import annotations

import asyncio
import errno
from pathlib import Path
from typing import IO, Any

from grpo_tui.common.blas import active_blas
from grpo_tui.common.blas import describe as describe_blas
from grpo_tui.common.blas_warning import slow_blas_warning
from grpo_tui.common.commands import resume_command, run_command
from grpo_tui.common.data_check import small_data_note
from grpo_tui.common.preflight import folder_problems, not_a_checkpoint
from grpo_tui.common.resume_check import Resume, damage, damaged, fit_problem, model_problem, newest_first
from grpo_tui.common.run_folder import LinkedFile, link_sentence
from grpo_tui.protocol import messages as m
from grpo_tui.protocol.config import Config
from grpo_tui.protocol.layout import RUN_LOG_FILE, STORE_FILE
from grpo_tui.protocol.outcome import Mistake
from grpo_tui.worker import checkpoint_files as ckpt
from grpo_tui.worker import ranks
from grpo_tui.worker.checkpoint_policy import CheckpointPolicy
from grpo_tui.worker.context import RunContext
from grpo_tui.worker.doctor_probe import probe_before_step_1
from grpo_tui.worker.live_settings import LiveChanges
from grpo_tui.worker.mlx_thread import TrainerFactory
from grpo_tui.worker.store import Store, StoreDamaged, set_damaged_aside


class RunStart:
    """Starts one run; ``lock`` holds the output folder while the process lives."""

    def __init__(self, run: RunContext, checkpoints: CheckpointPolicy, make_trainer: TrainerFactory,
                 leader: bool, distributed: bool, live: LiveChanges) -> None:
        self.run = run
        self.live = live
        self.checkpoints = checkpoints
        self.make_trainer = make_trainer
        self.leader = leader
        self.distributed = distributed
        self.lock: IO[Any] | None = None
        self.epoch_metrics: list[tuple[float | None, float | None]] = []  # the resumed epoch's steps so far
        self.tokens_seen = 0  # the resumed steps' tokens (the store's; 0 without it)

    async def start(self) -> None:
        """Load the run; a run that cannot start raises a ``Mistake`` that says why."""
        run, cfg = self.run, self.run.config
        if not self.leader:
            return await self._follow()
        run.emit(m.Status(phase="loading", message="preparing the output folder"))
        for problem in folder_problems(cfg):  # before anything is created or moved aside
            raise Mistake("output", problem)
        try:
            self.lock = ckpt.lock_output_dir(run.output_dir)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise Mistake("output", link_sentence(run.output_dir / ckpt.LOCK_FILE)) from None  # a read-only file system, a full disk, ...
            raise Mistake("output", f"checkpoint.output_dir: {run.output_dir} cannot be written ({exc.strerror}); "
                          "choose a folder you can write to") from exc
        if self.lock is None:
            raise Mistake(
                "output", f"another worker is already training in {run.output_dir}; stop it first, or set "
                "checkpoint.output_dir to another folder",
            )
        resume = await find_resume(run)
        try:
            run.emitter.open_jsonl(run.output_dir / RUN_LOG_FILE)
        except LinkedFile as exc:
            raise Mistake("output", exc.strerror or str(exc)) from None
        # A checkpoint from another output folder belongs to another store: record a new run.
        ours = resume is not None and resume[0].parent.resolve() == run.output_dir.resolve()
        later: list[m.SettingChanged] = []
        if cfg.store.enabled:
            later = await self._open_store(resume[1] if resume is not None and ours else None)
        if resume is not None:  # before the model loads: a change of the length or the sampler counts from the start
            for line in self.live.resume(resume[1], later):
                run.log("info", line)
            for change in self.live.overridden:  # what compare and the charts read: the value the run trains with
                run.emit(change)
                if run.store is not None:
                    await run.store.write_change(run.run_id, change)
        if cfg.doctor.probe and resume is None and "probe" not in cfg.doctor.silence:  # before step 1 (docs/doctor.md)
            await probe_before_step_1(run)
        run.emit(m.Status(phase="loading", message=f"loading {cfg.model.path}"))
        main_loop = asyncio.get_running_loop()

        def log_from_thread(level: m.LogLevel, message: str) -> None:
            main_loop.call_soon_threadsafe(run.log, level, message)

        run.loaded = trainer = await run.mlx(self.make_trainer, cfg, log_from_thread)
        run.model_identity = dict(getattr(trainer, "model_identity", None) or {})
        if (note := small_data_note(trainer.dataset_size, cfg.training.batch_size, cfg.data.label)) is not None:
            run.log("warning", note)
        active = active_blas()  # verified in this process, not assumed from the config
        blas = describe_blas(active)
        run.log("info", f"BLAS: {blas}")
        if slow := slow_blas_warning(active):
            run.log("warning", slow)
        run.emitter.total_steps = trainer.total_steps
        run.emitter.plain_every = cfg.logging.steps
        if run.store is not None:
            await run.store.update_run(run.run_id, model=trainer.model_name, total_steps=trainer.total_steps)
        if resume is not None:
            await self._restore(*resume)
        if self.distributed:
            await run.mlx(trainer.sync_from_leader, run.step)
        run.emit(
            m.Init(
                model=trainer.model_name, model_path=cfg.model.path, config=resolved_config(cfg, blas),
                dataset_size=trainer.dataset_size, steps_per_epoch=trainer.steps_per_epoch,
                total_steps=trainer.total_steps, num_epochs=trainer.num_epochs, output_dir=str(run.output_dir),
                ranks=ranks.describe(trainer)[0], backend=ranks.describe(trainer)[1],
                sample_display=run.control.display,
            )
        )  # fmt: skip

    async def _follow(self) -> None:
        """A rank > 0 starts: no lock, store or run log; rank 0's weights and step."""
        run = self.run
        run.loaded = trainer = await run.mlx(self.make_trainer, run.config, lambda level, message: None)
        run.control.step = await run.mlx(trainer.sync_from_leader, 0)

    async def _open_store(self, state: ckpt.TrainingState | None) -> list[m.SettingChanged]:
        """Open the store and record (or reopen) the run; the live changes recorded after the
        resumed checkpoint's step (a kill came before the next checkpoint), which the resume applies again."""
        run, cfg = self.run, self.run.config
        later: list[m.SettingChanged] = []
        path = Path(cfg.store.path) if cfg.store.path else run.output_dir / STORE_FILE
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            run.store = store = await Store.open(path)
        except LinkedFile as exc:
            raise Mistake("output", exc.strerror or str(exc)) from None
        except StoreDamaged as exc:
            if cfg.store.if_damaged != "fresh":
                raise Mistake("output", f"the store {path} is damaged ({exc}); to go on with a fresh store, the "
                                        "damaged file kept beside it: "
                                        f"{run_command(run.config_path, 'store.if_damaged=fresh')}; or train "
                                        f"without one: {run_command(run.config_path, 'store.enabled=false')}") from None
            aside = await run.mlx(set_damaged_aside, path)
            run.log("warning", f"the store {path} is damaged ({exc}); kept as {aside.name}, starting a fresh store")
            run.store = store = await Store.open(path)
        if await store.mark_abandoned_runs(str(run.output_dir)):
            run.log("info", "an earlier run in this store ended without finishing; marked crashed")
        if state is not None:
            later = await store.changes(state.run_id, after=state.step)
        if state is not None and await store.reopen_run(state.run_id, state.step, state.total_steps):
            run.run_id = state.run_id
        else:
            if state is not None:
                run.log("warning", f"run {state.run_id} is not in the store; recording a new run")
            model = Path(cfg.model.path).name
            run.run_id = await store.create_run(cfg.run_name, model, cfg.model.path, cfg.to_dict(), 0)
        run.emit(m.DatabasePath(path=str(store.path), run_id=run.run_id, run_name=cfg.run_name))
        return later

    async def _restore(self, path: Path, state: ckpt.TrainingState) -> None:
        run = self.run
        trainer = run.trainer
        run.emit(m.Status(phase="loading", message=f"resuming from {path}"))
        check_same_model(run, path, state)
        try:
            await run.mlx(trainer.load_checkpoint, path)
        except Exception as exc:  # noqa: BLE001 — any way a checkpoint's files fail to load: name it
            aside = await run.mlx(ckpt.set_damaged_aside, path)
            raise Mistake("resume", f"checkpoint {path} does not load ({type(exc).__name__}: {exc}); it is set aside "
                                    f"as {aside.name}: run again to resume from the checkpoint before it") from exc
        if run.store is None:
            run.run_id = state.run_id
        run.control.step = state.step
        self.checkpoints.resumed(state.step, path, emergency=state.kind == "emergency")
        if state.dataset_hash != trainer.dataset_hash or state.dataset_size != trainer.dataset_size:
            how = (f"{state.dataset_size} -> {trainer.dataset_size} rows" if state.dataset_size != trainer.dataset_size
                   else f"the same {trainer.dataset_size} rows, but their content changed")
            run.log("warning", f"the dataset changed since {path.name} ({how}); the data order after the resume "
                               "differs from the original run")
        if state.config_digest != ckpt.config_digest(run.config):
            run.log("info", f"training settings differ from those of {path.name}")
        history, aggregates = await run.store.history(run.run_id) if run.store else ([], m.Aggregates())
        epoch, step_in_epoch = run.position(state.step)
        self.epoch_metrics = await run.store.epoch_metrics(run.run_id, epoch, state.step) if run.store else []
        self.tokens_seen = aggregates.total_tokens
        run.emit(
            m.ResumeState(
                step=state.step, epoch=epoch, total_epochs=trainer.num_epochs, step_in_epoch=step_in_epoch,
                steps_per_epoch=trainer.steps_per_epoch, history=history, aggregates=aggregates,
                changes=list(run.live_changes),
            )
        )  # fmt: skip
        for done in await run.store.evals(run.run_id) if run.store else []:
            run.emit(done)  # the eval curve so far
        run.log("info", f"resumed from {path} at step {state.step}")


async def find_resume(run: RunContext) -> Resume | None:
    """The checkpoint to resume from (``checkpoint.resume``), None for a fresh start; a resume path
    that is not a checkpoint is a ``Mistake``. Runs the file work on the MLX thread."""
    resume, output_dir = run.config.checkpoint.resume, run.output_dir
    await run.mlx(ckpt.recover_interrupted, output_dir)
    if resume is False:
        aside = await run.mlx(ckpt.set_aside, output_dir)
        if aside is not None:
            run.log("warning", f"resume = false: earlier checkpoints moved to {aside}")
        return None
    if resume == "latest":
        found = await latest_that_loads(run)
        for path in await run.mlx(ckpt.skipped_newer, output_dir, found[1].step if found else -1):
            run.log("info", f"resume = latest: not resuming from {path}, saved after non-finite steps (or a copy "
                    f"kept then); to resume from it anyway: {resume_command(run.config_path, path)}")
        if found is not None:
            check_fits(run, *found)
        return found
    state = ckpt.read_state(Path(str(resume)))
    if state is None:
        raise Mistake("resume", not_a_checkpoint(str(resume)))
    if (why := await run.mlx(damage, Path(str(resume)))) is not None:
        raise Mistake("resume", damaged(str(resume), why, run.config_path))
    check_fits(run, Path(str(resume)), state)
    return Path(str(resume)), state


def check_fits(run: RunContext, path: Path, state: ckpt.TrainingState) -> None:
    """Before the model loads: the checkpoint is of the kind ``[model.lora]`` says (full fine-tuning
    or LoRA adapters) and, for a local model folder, of the model ``model.path`` names (a hub id or
    a GGUF file: ``check_same_model`` once loaded). ``common/resume_check.py`` decides, for
    ``grpo-tui check`` too."""
    cfg = run.config
    if (problem := fit_problem(path, state, cfg.model.lora is not None, cfg.model.path, run.config_path)) is not None:
        raise Mistake("resume", problem)


async def latest_that_loads(run: RunContext) -> Resume | None:
    """The newest resumable checkpoint whose files are whole; each damaged one newer than it is
    named, set aside as ``damaged-<name>`` (kept) and passed over, and the log says where the
    run resumes instead."""
    passed: list[str] = []
    found: Resume | None = None
    for path, state in await run.mlx(newest_first, run.output_dir):  # as resume_check.latest_whole walks them
        if (why := await run.mlx(damage, path)) is None:
            found = path, state
            break
        aside = await run.mlx(ckpt.set_damaged_aside, path)
        run.log("warning", f"checkpoint {path} does not load: {why}; set aside as {aside.name}")
        passed.append(path.name)
    if passed:
        instead = f"resuming from {found[0]} instead" if found is not None else "no earlier checkpoint: starting from step 0"
        run.log("warning", f"resume = latest: {', '.join(passed)} damaged; {instead}")
    return found


def check_same_model(run: RunContext, path: Path, state: ckpt.TrainingState) -> None:
    """A checkpoint resumes only into the model it was trained from (the loaded model's identity
    against the one its state records); ``common/resume_check.py`` decides, for ``check`` too."""
    if (problem := model_problem(path, state.model, run.model_identity, run.config_path)) is not None:
        raise Mistake("resume", problem)


def resolved_config(cfg: Config, active_blas: str) -> dict[str, Any]:
    """The config as the worker runs it, plus what it found at start (shown in the Config tab)."""
    config = cfg.to_dict()
    config["runtime"]["active_blas"] = active_blas
    return config
