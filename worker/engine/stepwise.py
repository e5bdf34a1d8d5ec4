"""The engine step by step, in the caller's process: ``from grpo_tui import Engine`` (docs/python-api.md,
"Step by step"; mlx-node's ``generateBatch`` / ``scoreGenerations`` / ``trainStep``).

A worker step is ``step.train_step``: ``begin_step``, a rollout and scoring round, ``learn``. The
engine API runs the same three pieces on the same collaborators (plan, speed paths, compiled
functions, keyed sampling) with the caller in between: ``generate`` begins the step and rolls out,
``score`` applies the configured rewards (or the caller brings its own numbers), ``train_step``
learns from them. With the dataset's batch, N rounds of the three equal N worker steps of the same
config (tests/worker/engine/test_stepwise.py). Dynamic sampling, several ranks, generation reuse and the live
channel belong to the worker and are not offered here.
"""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from grpo_tui.protocol import messages as m
from grpo_tui.protocol.config import Config, load_config
from grpo_tui.protocol.layout import TrainingState, read_state
from grpo_tui.worker import checkpoint_files as ckpt
from grpo_tui.worker import evaluation
from grpo_tui.worker.engine.prompts import data
from grpo_tui.worker.engine import dynamic_sampling, step as engine_step
from grpo_tui.worker.engine.scoring.reward_call import StepLog
from grpo_tui.worker.engine.policy.rollout import Completion
from grpo_tui.worker.engine.trainer import MlxTrainer, default_log
from grpo_tui.worker.trainer_contract import Generation, StepOutput


class EngineError(ValueError):
    """A call the engine cannot do as asked: one sentence that says what to do instead."""


@dataclass
class Batch:
    """One step's completions, ``group_size`` per prompt, in prompt order: what ``generate`` made."""

    step: int
    epoch: int
    examples: list[data.Example]
    completions: list[Completion]
    generation_s: float = 0.0
    # filled by ``score`` (the configured rewards): the weighted totals, each function's scores, notes
    rewards: list[float | None] | None = None
    per_function: dict[str, list[float | None]] = field(default_factory=dict)
    logged: StepLog | None = None
    scoring_s: float = 0.0

    @property
    def texts(self) -> list[str]:
        return [c.text for c in self.completions]

    @property
    def prompts(self) -> list[Any]:
        """Each completion's prompt, as its row had it (a string or chat messages)."""
        return [self.examples[c.prompt_index].prompt for c in self.completions]

    @property
    def token_ids(self) -> list[list[int]]:
        return [list(c.token_ids) for c in self.completions]

    @property
    def finish_reasons(self) -> list[str]:
        return [c.finish_reason for c in self.completions]

    @property
    def columns(self) -> list[dict[str, Any]]:
        """Each completion's row columns (``answer`` and the rest: what reward functions receive)."""
        return [self.examples[c.prompt_index].columns for c in self.completions]


class Engine:
    """A run's trainer in this process, driven one phase at a time.

    ``Engine(config)`` takes a ``Config`` or a TOML path (``overrides``: ``--set`` items). ``store``:
    write each trained step into this SQLite store (``grpo-tui browse`` opens it); default none.
    """

    def __init__(self, config: Config | str | Path, *, overrides: list[str] | None = None,
                 store: str | Path | None = None, log: Callable[[m.LogLevel, str], None] = default_log) -> None:
        self.config = config if isinstance(config, Config) else load_config(config, overrides=overrides or ())
        if self.config.training.steps_per_generation > 1:
            raise EngineError(f"training.steps_per_generation = {self.config.training.steps_per_generation}: the engine "
                              "generates one step at a time, so each generate() is its own generation; "
                              "set it to 1, or train with the worker (GRPOTrainer, grpo-tui run)")
        if self.config.curriculum.on:
            raise EngineError(f"curriculum.strategy = {self.config.curriculum.strategy!r}: the engine's batches are "
                              "the data order (the caller may score anything in between); set it to \"off\", or "
                              "train with the worker (GRPOTrainer, grpo-tui run)")
        if self.config.async_.on:
            raise EngineError(f"async.max_staleness = {self.config.async_.max_staleness}: the engine runs each phase "
                              "when you call it, in this process, so nothing generates ahead; set it to 0, or train "
                              "with the worker (GRPOTrainer, grpo-tui run), which starts the generator")
        self.trainer = MlxTrainer(self.config, log)
        self.step = 0  # the last step trained
        self._store: Any = None
        self._run_id = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._last: StepOutput | None = None
        if store is not None:
            self._open_store(Path(store))

    # ------------------------------------------------------------ the three phases

    def generate(self, prompts: list[Any] | None = None) -> Batch:
        """The next step's completions: of ``prompts`` (strings, chat message lists, or rows with the
        config's prompt column and any others), else of the dataset's next batch, as the worker's."""
        step = self.step + 1
        parts = self.trainer.parts
        parts.begin_step(step)
        if prompts is None:
            epoch, _, indices = parts.prompts.batch(step)
            examples = parts.prompts.examples(indices)
        else:
            epoch, examples = parts.prompts.batch(step)[0], self._examples(prompts)
        t0 = time.perf_counter()
        completions = parts.policy.roll_out(step, [e.prompt_ids for e in examples], list(range(len(examples))))
        return Batch(step, epoch, examples, completions, generation_s=time.perf_counter() - t0)

    def score(self, batch: Batch) -> list[float | None]:
        """The configured rewards of ``batch`` (weighted totals, one per completion; also kept in it)."""
        t0 = time.perf_counter()
        owners = [batch.examples[c.prompt_index] for c in batch.completions]
        parts = self.trainer.parts
        totals, per_fn, logged = parts.scorer.score(owners, batch.completions, parts.state(batch.step))
        batch.rewards, batch.per_function, batch.logged = totals, per_fn, logged
        batch.scoring_s = time.perf_counter() - t0
        return totals

    def train_step(self, batch: Batch, rewards: list[float | None] | None = None) -> m.Step:
        """One optimiser step on ``batch`` with ``rewards`` (any numbers the caller computed, one per
        completion, None = not applicable), else the batch's ``score``; returns the step's metrics."""
        if batch.step != self.step + 1:
            raise EngineError(f"this batch is step {batch.step}'s and the engine is at step {self.step}: "
                              "generate a new batch for the next step")
        if rewards is not None:
            if len(rewards) != len(batch.completions):
                raise EngineError(f"{len(rewards)} rewards for {len(batch.completions)} completions: give one per completion")
            totals = [None if r is None or (isinstance(r, float) and math.isnan(r)) else float(r) for r in rewards]
            per_fn, logged = {"reward": totals}, StepLog(len(totals))
        else:
            if batch.rewards is None:
                self.score(batch)
            assert batch.rewards is not None and batch.logged is not None
            totals, per_fn, logged = batch.rewards, batch.per_function, batch.logged
        round_ = dynamic_sampling.Round(batch.examples, batch.completions, totals, per_fn, logged,
                                        batch.generation_s, batch.scoring_s)
        selection = dynamic_sampling.select([round_], self.config.grpo.group_size, len(batch.examples), dynamic=False)
        out = engine_step.learn(self.trainer.parts, batch.step, batch.epoch, selection)
        self.step = batch.step
        self._record(out)
        return out.metrics

    def step_once(self) -> m.Step:
        """``generate``, ``score`` and ``train_step`` on the dataset's next batch: one worker step."""
        batch = self.generate()
        self.score(batch)
        return self.train_step(batch)

    @property
    def last_generations(self) -> list[Generation]:
        """The stored form of the last trained step's completions (reward breakdown, advantage, …)."""
        return self._last.generations if self._last is not None else []

    # ------------------------------------------------------------ evaluation, checkpoints

    def evaluate(self, limit: int = 0, greedy: bool = True, num_samples: int = 1) -> m.Eval:
        """The configured rewards on the eval prompts (``data.eval_path``; else the training prompts),
        folded as the worker's ``[eval]`` folds them: each reward's mean, accuracy, pass@k."""
        trainer = self.trainer
        count = trainer.eval_size if limit <= 0 else min(limit, trainer.eval_size)
        tally = evaluation.EvalTally(num_samples, self.config.accuracy_label)
        t0 = time.perf_counter()
        for indices in evaluation.chunks(count, self.config.eval.batch_size if self.config.eval else 16):
            got = trainer.evaluate_batch(list(indices), greedy=greedy, num_samples=num_samples,
                                         seed=evaluation.eval_seed(self.config.training.seed, self.step))
            tally.add(got.per_fn, got.totals, got.lengths, got.finish)
        return tally.summary(self.step, greedy, time.perf_counter() - t0)

    def save(self, path: str | Path) -> Path:
        """A checkpoint at ``path`` (what ``mlx_lm.load`` opens, the optimizer and the step), which
        ``load`` and ``grpo-tui run … --resume PATH`` go on from."""
        target = Path(path)
        trainer, t = self.trainer, self.config.training
        epoch, step_in_epoch, _ = trainer.batch(self.step) if self.step else (0, 0, [])
        state = TrainingState(step=self.step, epoch=epoch, step_in_epoch=step_in_epoch, kind="manual", run_id=self._run(),
                              seed=t.seed, dataset_size=trainer.dataset_size, dataset_hash=trainer.dataset_hash,
                              config_digest=ckpt.config_digest(self.config), total_steps=trainer.total_steps,
                              model=dict(getattr(trainer, "model_identity", None) or {}),
                              config=self.config.to_dict())  # fmt: skip
        return ckpt.save_checkpoint(trainer, target.parent, target.name, state)

    def load(self, path: str | Path) -> int:
        """Weights, optimizer and step from a checkpoint (``save``'s or a worker's); returns the step."""
        directory = Path(path)
        state = read_state(directory)
        if state is None:
            raise EngineError(f"{directory} is not a checkpoint (no training_state.json): give a checkpoint-N folder")
        self.trainer.load_checkpoint(directory)
        self.step = state.step
        if self._store is not None and self._loop is not None and not self._run_id and state.run_id:
            # the store's run goes on (its rows after the step dropped, as a worker's resume drops them)
            if self._loop.run_until_complete(self._store.reopen_run(state.run_id, state.step, self.trainer.total_steps)):
                self._run_id = state.run_id
        return self.step

    # ------------------------------------------------------------ the optional store

    def _examples(self, prompts: list[Any]) -> list[data.Example]:
        column = self.config.data.prompt_column
        rows = [p if isinstance(p, dict) else {column: p} for p in prompts]
        examples = data.examples_of(rows, self.config.data, "prompts")
        parts = self.trainer.parts
        data.render(examples, parts.policy.tokenizer, self.config.generation.enable_thinking)
        parts.prompts.fit(examples, "prompts", parts.policy.tokenizer)
        return examples

    def _open_store(self, path: Path) -> None:
        from grpo_tui.worker.store import Store

        self._loop = asyncio.new_event_loop()
        self._store = self._loop.run_until_complete(Store.open(path))

    def _run(self) -> int:
        """The store's run, begun at the first step recorded (or saved) unless ``load`` went on with a
        checkpoint's; 0 without a store."""
        if self._store is not None and self._loop is not None and not self._run_id:
            cfg = self.config
            self._run_id = self._loop.run_until_complete(self._store.create_run(
                cfg.run_name, Path(cfg.model.path).name, cfg.model.path, cfg.to_dict(), self.trainer.total_steps))
        return self._run_id

    def _record(self, out: StepOutput) -> None:
        self._last = out
        if self._store is not None and self._loop is not None:
            self._loop.run_until_complete(self._store.write_step(self._run(), out))

    def close(self, status: str = "completed") -> None:
        """Mark the store's run ``status`` (completed, stopped or crashed) and close the store."""
        if self._store is not None and self._loop is not None:
            if self._run_id:
                self._loop.run_until_complete(self._store.finish_run(self._run_id, status))
            self._loop.run_until_complete(self._store.close())
            self._loop.close()
            self._store = self._loop = None

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, kind: type[BaseException] | None, *exc: object) -> None:
        # a loop that raised is not a completed run: browse and ls say how it ended
        self.close("completed" if kind is None else "stopped" if issubclass(kind, KeyboardInterrupt) else "crashed")
