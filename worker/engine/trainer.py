"""The engine's side of the contract with the worker process (``trainer_contract.Trainer``): it loads the run
(the user's inputs, the model, the plan) into its collaborators, a policy, a scorer and a learner
over the run's prompts (docs/architecture.md, "The step's spine"), and answers the process side's
calls with them: ``MlxTrainer.train_step`` is ``step.train_step``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Callable

import mlx.core as mx
from mlx.utils import tree_flatten

from grpo_tui.protocol.config import Config
from grpo_tui.protocol.messages import LogLevel, Phase
from grpo_tui.worker.engine import distributed, scored_round
from grpo_tui.worker.engine.accel import patches
from grpo_tui.worker.engine import asynchronous
from grpo_tui.worker.engine.asynchronous.learner_side import AsyncSteps
from grpo_tui.worker.engine.collaborators import Collaborators
from grpo_tui.worker.engine.generation_reuse import HeldStep
from grpo_tui.worker.engine.inputs import Inputs, load_inputs
from grpo_tui.worker.engine.learning import gradient_checkpointing
from grpo_tui.worker.engine.learning.learner import REFERENCE_FILE, Learner
from grpo_tui.worker.engine.models import memory_fit, model_io, model_source, plan as engine_plan
from grpo_tui.worker.engine.policy import agent
from grpo_tui.worker.engine.policy.policy import Policy
from grpo_tui.worker.engine.prompts.run_prompts import RunPrompts
from grpo_tui.worker.engine.scoring import judge
from grpo_tui.worker.engine.scoring.rewards import RewardError
from grpo_tui.worker.engine.scoring.scorer import Scorer
from grpo_tui.worker.engine.step import train_step
from grpo_tui.worker.trainer_contract import EvalBatch, StepOutput

__all__ = ["MlxTrainer", "RewardError", "REFERENCE_FILE", "default_log", "load_collaborators"]


def default_log(level: LogLevel, message: str) -> None:
    print(f"[{level}] {message}", file=sys.stderr)


def load_collaborators(config: Config, log: Callable[[LogLevel, str], None], inputs: Inputs | None = None,
                       ranks: distributed.Ranks | None = None) -> Collaborators:
    """Everything a run's steps need, loaded once, in the order that keeps memory and mistakes right.
    ``ranks``: [async]'s two processes are one learner and one generator, never ranks of the same group."""
    # Before MLX evaluates or allocates anything.
    keeps_freed_memory = engine_plan.prepare_process(saving_memory=engine_plan.saves_memory(config),
                                                     parameters=model_source.parameter_count(config.model.path, config.model.dequantize),
                                                     sharing_cores=config.async_.shares_cores)
    ranks = ranks or distributed.Ranks.join(config.distributed.backend)
    ranks.check(config.training.batch_size, config.training.gradient_accumulation_steps)
    log("info", f"loading {config.model.path}")
    if note := model_source.NOTES.get(config.model.path):  # where a GGUF file's mlx-lm folder is
        log("info", note)
    # The user's files before the model loads (the worker reads them before MLX: ``inputs``). The
    # rewards before the plan's memory estimate: a judge model's weights live beside the policy's.
    inputs = inputs or load_inputs(config)
    model, tokenizer = model_io.load(config.model)
    prompts = RunPrompts(config, inputs.dataset, inputs.dataset_hash, inputs.eval_dataset, log)
    prompts.render(tokenizer, inputs.eval_label)
    plan = engine_plan.decide(model, config, prompt_tokens=max(len(e.prompt_ids) for e in prompts.dataset),
                              extra_bytes=judge.weights_bytes(inputs.rewards), keeps_freed_memory=keeps_freed_memory)
    ref_model = model_io.load_reference(config.model) if config.grpo.beta > 0 else None
    for m in (model, ref_model):
        if m is not None and plan.cpu_kernels:
            patches.patch_model(m)
    policy = Policy(config, model_io.display_name(config.model.path), model, tokenizer, plan, inputs.tools, ranks.rank, log)
    if plan.memory_fit is not None:
        mx.set_memory_limit(memory_fit.evaluation_limit(config.training.memory_limit_gb))
        log("info", f"{plan.memory_fit}; MLX's evaluation waits for queued work "
                    f"past {mx.get_memory_limit() / memory_fit.GB:.1f} GB of arrays")
    if plan.gradient_checkpointing:
        gradient_checkpointing.checkpoint_blocks(model)
    if note := prompts.schedule_note():
        log("info", note)
    learner = Learner(config, model, ref_model, plan, ranks, log)
    n_train = sum(v.size for _, v in tree_flatten(model.trainable_parameters()))
    log("info", f"{policy.name}: {n_train:,} trainable parameters, {prompts.dataset_size} prompts")
    log("info", "engine: " + plan.describe())
    scorer = Scorer(config, inputs.rewards, inputs.tools, inputs.environment, log)
    if inputs.tools or inputs.environment:
        agent.check_template(tokenizer, config.generation.enable_thinking)
        names = [t.name for t in inputs.tools + getattr(inputs.environment, "probe_tools", [])]
        log("info", f"tools: {', '.join(names)}; a row whose turn calls them waits for their results while the "
                    f"other rows decode (at most {config.generation.max_tool_calls} calls per completion)")
    return Collaborators(config, prompts, policy, scorer, learner, ranks, inputs.rollout_func, log)


class MlxTrainer:
    """What the worker's loop calls (``trainer_contract.Trainer``), on the MLX thread."""

    def __init__(self, config: Config, log: Callable[[LogLevel, str], None] = default_log,
                 inputs: Inputs | None = None) -> None:
        # [async]: the generator starts first, so that it loads the model while this process does
        started = asynchronous.start(config) if config.async_.on else None
        try:
            self.parts = load_collaborators(config, log, inputs, ranks=distributed.Ranks() if started else None)
        except BaseException:
            if started is not None:  # its process is ours, not user code left running
                started.stop()
            raise
        self.asynchronous = AsyncSteps(self.parts, started) if started is not None else None
        self.policy, self.scorer, self.learner = self.parts.policy, self.parts.scorer, self.parts.learner
        self.prompts, self.ranks = self.parts.prompts, self.parts.ranks
        self.model_name = self.policy.name
        self.model_identity = model_source.identity(config.model.path)  # recorded in every checkpoint
        self.dataset_hash = self.prompts.dataset_hash
        self.dataset_size = self.prompts.dataset_size
        self.steps_per_epoch = self.prompts.steps_per_epoch
        self.held: dict[int, HeldStep] = {}  # steps_per_generation: the later steps' shares

    # The schedule moves with a live change of max_steps (``RunPrompts.follow``).
    @property
    def num_epochs(self) -> int:
        return self.prompts.num_epochs

    @property
    def total_steps(self) -> int:
        return self.prompts.total_steps

    def batch(self, step: int) -> tuple[int, int, list[int]]:
        return self.prompts.batch(step)

    def train_step(self, step: int, on_phase: Callable[[Phase], None] = lambda p: None) -> StepOutput:
        if self.asynchronous is not None:
            return self.asynchronous.train_step(step, on_phase)
        return train_step(self.parts, step, self.held, on_phase)

    def close(self) -> None:
        if self.asynchronous is not None:
            self.asynchronous.close()

    @property
    def eval_size(self) -> int:
        return len(self.prompts.eval_rows)

    def evaluate_batch(self, indices: list[int], *, greedy: bool, num_samples: int, seed: int | None) -> EvalBatch:
        return scored_round.evaluate(self.parts, indices, greedy=greedy, num_samples=num_samples, seed=seed)

    # ------------------------------------------------------------ several ranks (distributed.py)

    def leader_value(self, value: int) -> int:
        """Rank 0's ``value`` on every rank (the loop's step-boundary agreement)."""
        return distributed.leader_value(self.ranks, value)

    def sync_from_leader(self, step: int) -> int:
        """Rank 0's weights, optimizer state and step on every rank, after rank 0 resumed."""
        learner = self.learner
        distributed.broadcast_state(self.ranks, learner.model, learner.optimizer)
        if learner.ref_model is not None and self.parts.config.grpo.sync_ref_model:
            distributed.broadcast_weights(self.ranks, learner.ref_model)  # rank 0 read the synced reference
        if (chosen := self.prompts.curriculum) is not None:  # rank 0 read the checkpoint's
            chosen.restore(self.leader_bytes(chosen.to_bytes()))
        return distributed.leader_value(self.ranks, step)

    def leader_bytes(self, payload: bytes) -> bytes:
        return self.ranks.gather_bytes(payload)[0]  # rank 0's live changes of a boundary

    # ------------------------------------------------------------ live changes (docs/steering.md)

    def live_problem(self, key: str, value: object) -> str | None:
        """Why the loaded run cannot take ``key`` = ``value``, asked of the collaborator that owns it.
        Reads only what loading fixed, so it answers at once, while a step runs."""
        if key.startswith("async.") and self.asynchronous is None:
            return ("needs the generator process, which starts with the run: this run started synchronous "
                    "(async.max_staleness = 0); stop it and resume with --set async.max_staleness=1")
        return (self.learner.live_problem(key, value)
                or self.policy.live_problem(key, value, self.prompts.every_prompt)
                or self.prompts.live_problem(key, value))

    def settings_changed(self, keys: list[str]) -> None:
        """The shared config now holds live changes of ``keys``: each collaborator follows its own."""
        for part in (self.scorer, self.prompts, self.learner, self.policy):
            part.follow(keys)
        if self.asynchronous is not None:  # the generator follows them with the step's answer
            self.asynchronous.follow(keys)

    # ------------------------------------------------------------ checkpoints

    def save_model(self, directory: Path) -> None:
        self.learner.save(Path(directory), self.policy.tokenizer)
        self.prompts.save(Path(directory))

    def save_optimizer(self, path: Path) -> None:
        self.learner.save_optimizer(path)

    def load_checkpoint(self, directory: Path) -> None:
        self.learner.load(Path(directory))
        self.prompts.load(Path(directory))
