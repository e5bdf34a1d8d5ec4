"""The GRPO step: rollout -> rewards -> advantages -> accumulated loss/gradients -> clip -> AdamW.

``Trainer`` is the engine's side of the contract with the worker process (``records.Trainer``): it
owns the model, tokenizer, dataset, reward functions, optimizer, the engine plan and the compiled
functions, and ``train_step`` returns a ``StepOutput`` with every ``protocol.messages.Step`` metric
(TRL's names) and every generation.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Callable

import mlx.core as mx
import numpy as np
from mlx.utils import tree_flatten, tree_unflatten

from grpo_tui.protocol.config import Config
from grpo_tui.protocol.layout import OPTIMIZER_FILE
from grpo_tui.protocol.messages import LogLevel, Phase
from grpo_tui.worker.engine.policy import agent
from grpo_tui.worker.engine.learning import gradient_checkpointing as checkpointing
from grpo_tui.worker.engine.prompts import data
from grpo_tui.worker.engine import distributed, dynamic_sampling, live
from grpo_tui.worker.engine.models import memory_fit, model_io
from grpo_tui.worker.engine.scoring import environments, judge
from grpo_tui.worker.engine import generation_reuse
from grpo_tui.worker.engine.models import model_source
from grpo_tui.worker.engine.models import plan as engine_plan
from grpo_tui.worker.engine.policy import rollout, rollout_func, sampling
from grpo_tui.worker.engine import scored_round
from grpo_tui.worker.engine import step_output
from grpo_tui.worker.engine.accel import fastgen, patches
from grpo_tui.worker.engine.learning.grpo import advantages as grpo_advantages, group_std
from grpo_tui.worker.engine.inputs import Inputs, load_inputs
from grpo_tui.worker.engine.learning.loss import LossFunctions
from grpo_tui.worker.engine.scoring.reward_call import TrainerState
from grpo_tui.worker.engine.scoring.rewards import RewardError, score_completions
from grpo_tui.worker.engine.learning.schedule import scheduled_lr
from grpo_tui.worker.engine.step_output import StepResults, step_frame
from grpo_tui.worker.engine.learning.grpo import EntropyCoefficient
from grpo_tui.worker.engine.learning.update import PassResult, make_optimizer, micro_batches, optimize_pass
from grpo_tui.worker.records import EvalBatch, StepOutput

__all__ = ["Trainer", "RewardError", "default_log"]

REFERENCE_FILE = "reference.safetensors"  # grpo.sync_ref_model: the synced reference, in checkpoints

def _advantage_by_completion(selection: dynamic_sampling.Selection, trained: list[float], G: int) -> list[float]:
    """Each generated completion's advantage: its trained slot's, 0 for a dropped group's (its
    rewards are all equal, or it was beyond the batch)."""
    out = [0.0] * len(selection.completions)
    for k, g in enumerate(selection.slots):
        if k not in selection.padding:
            out[g * G : (g + 1) * G] = trained[k * G : (k + 1) * G]
    return out


def _judge_metrics(rewards: list) -> dict[str, float]:
    """``judge/seconds``: the judge models' time this step (part of ``scoring_ms``), when there are any."""
    seconds = judge.take_seconds(rewards)
    return {} if seconds is None else {"judge/seconds": seconds}


def _cut_metrics(config: Config, examples: list[data.Example]) -> dict[str, float]:
    """``prompts_truncated``: the step's prompts cut by ``max_prompt_length`` (only when set)."""
    if config.generation.max_prompt_length is None:
        return {}
    return {"prompts_truncated": float(sum(e.cut > 0 for e in examples))}


def default_log(level: LogLevel, message: str) -> None:
    print(f"[{level}] {message}", file=sys.stderr)


class Trainer:
    def __init__(self, config: Config, log: Callable[[LogLevel, str], None] = default_log,
                 inputs: Inputs | None = None) -> None:
        # Before MLX evaluates or allocates anything.
        keeps_freed_memory = engine_plan.prepare_process(saving_memory=engine_plan.saves_memory(config),
                                                         parameters=model_source.parameter_count(config.model.path, config.model.dequantize))
        self.config = config
        self.ranks = distributed.Ranks.join(config.distributed.backend)
        self.ranks.check(config.training.batch_size, config.training.gradient_accumulation_steps)
        self.log = log
        self.model_name = model_io.display_name(config.model.path)
        log("info", f"loading {config.model.path}")
        if note := model_source.NOTES.get(config.model.path):  # where a GGUF file's mlx-lm folder is
            log("info", note)
        # The user's files before the model loads (the worker reads them before MLX: ``inputs``).
        # The rewards before the plan's memory estimate: a judge model's weights live beside the
        # policy's all run long.
        inputs = inputs or load_inputs(config)
        self.tools, self.rewards, self.environment, self.rollout_func = inputs.tools, inputs.rewards, inputs.environment, inputs.rollout_func
        self.dataset, self.dataset_hash, self.eval_dataset = inputs.dataset, inputs.dataset_hash, inputs.eval_dataset
        d, eval_label = config.data, inputs.eval_label
        self.model, self.tokenizer = model_io.load(config.model)
        self.model_identity = model_source.identity(config.model.path)  # recorded in every checkpoint
        data.render(self.dataset, self.tokenizer, config.generation.enable_thinking)
        self.fit_prompts(self.dataset, d.label)
        if self.eval_dataset is not None:
            data.render(self.eval_dataset, self.tokenizer, config.generation.enable_thinking)
            self.fit_prompts(self.eval_dataset, eval_label)
        self.plan = engine_plan.decide(self.model, config, prompt_tokens=max(len(e.prompt_ids) for e in self.dataset),
                                       extra_bytes=judge.weights_bytes(self.rewards),
                                       keeps_freed_memory=keeps_freed_memory)
        self.ref_model = model_io.load_reference(config.model) if config.grpo.beta > 0 else None
        for model in (self.model, self.ref_model):
            if model is not None and self.plan.cpu_kernels:
                patches.patch_model(model)
        self.losses = LossFunctions()  # compiled functions live as long as the model they were traced for
        self.entropy_coef = EntropyCoefficient.from_config(config)  # TRL's entropy bonus, across steps
        self.decode = fastgen.DecodeStep(self.model) if self.plan.fast_rollout else None
        self.retrace_from: float | None = None  # a live change dropped the traces then (live.py)
        self.held: dict[int, generation_reuse.HeldStep] = {}  # steps_per_generation: the later steps' shares
        if self.plan.memory_fit is not None:
            mx.set_memory_limit(memory_fit.evaluation_limit(config.training.memory_limit_gb))
            log("info", f"{self.plan.memory_fit}; MLX's evaluation waits for queued work "
                        f"past {mx.get_memory_limit() / memory_fit.GB:.1f} GB of arrays")
        if self.plan.gradient_checkpointing:
            checkpointing.checkpoint_blocks(self.model)
        self.dataset_size = len(self.dataset)
        self.steps_per_epoch = data.steps_per_epoch(self.dataset_size, config.training.batch_size)
        t = config.training
        self.num_epochs, self.total_steps = data.schedule(self.steps_per_epoch, t.num_epochs, t.max_steps)
        if t.max_steps > 0 and self.num_epochs != t.num_epochs:
            log("info", f"max_steps = {t.max_steps} overrides num_epochs = {t.num_epochs} (as in TRL): "
                        f"{self.num_epochs} passes over the {self.dataset_size} prompts")

        self.optimizer = make_optimizer(config)
        # AdamW's moments now rather than inside the first update: the first step's peak is then the
        # run's (what the dashboard shows and a memory limit is about), and the second step does not
        # grow the heap by the moments' size and page-fault it in.
        self.optimizer.init(self.model.trainable_parameters())
        mx.eval(self.optimizer.state)
        n_train = sum(v.size for _, v in tree_flatten(self.model.trainable_parameters()))
        log("info", f"{self.model_name}: {n_train:,} trainable parameters, {self.dataset_size} prompts")
        log("info", "engine: " + self.plan.describe())
        if self.tools or self.environment:
            agent.check_template(self.tokenizer, config.generation.enable_thinking)
            log("info", f"tools: {', '.join(t.name for t in self.tools + getattr(self.environment, 'probe_tools', []))}; a row whose turn calls them waits for "
                        f"their results while the other rows decode (at most {config.generation.max_tool_calls} "
                        "calls per completion)")

    def fit_prompts(self, examples: list[data.Example], label: str) -> None:
        """Before any rollout: cut the prompts (``max_prompt_length``) or refuse one that overflows
        the context; a prompt of any length otherwise reaches the model (and its memory)."""
        g = self.config.generation
        said = data.fit_prompts(examples, self.tokenizer, g.max_prompt_length, g.max_completion_length,
                                model_source.context_length(self.config.model.path), label)
        if said is not None:
            self.log("warning", said)

    # ------------------------------------------------------------ data order

    def batch(self, step: int) -> tuple[int, int, list[int]]:
        d, t = self.config.data, self.config.training
        return data.batch_indices(step, self.dataset_size, t.batch_size, shuffle=d.shuffle, seed=d.seed)

    # ------------------------------------------------------------ the step

    def train_step(self, step: int, on_phase: Callable[[Phase], None] = lambda p: None) -> StepOutput:
        cfg = self.config
        self.begin_step(step)
        epoch, _, indices = self.batch(step)
        if cfg.training.steps_per_generation > 1:  # this step's share of a generation (generation_reuse.py)
            held = self.held.pop(step, None) or generation_reuse.generate(self, step, on_phase)
            return self.learn(step, epoch, held.selection, on_phase, held=held)
        # round 0: the step's own prompts; with dynamic sampling, more rounds until the groups teach
        rounds, used = [scored_round.roll_and_score(self, step, 0, [self.dataset[i] for i in indices], on_phase)], set(indices)
        while (more := dynamic_sampling.next_round(step, rounds, used, self.dataset_size, cfg)) is not None:
            rounds.append(scored_round.roll_and_score(self, step, len(rounds), [self.dataset[i] for i in more], on_phase))
        selection = dynamic_sampling.select(rounds, cfg.grpo.group_size, cfg.training.batch_size, cfg.grpo.dynamic_sampling)
        return self.learn(step, epoch, selection, on_phase)

    def begin_step(self, step: int) -> None:
        """What every step starts with, before its rollout (also ``stepwise.Engine.generate``'s)."""
        self.seed(step)
        mx.reset_peak_memory()
        self.ranks.start_step()
        judge.take_seconds(self.rewards)  # an evaluation's judging since the last step is not this step's

    def seed(self, step: int) -> None:
        """Only mlx-lm's BatchGenerator path draws from this stream (see sampling.py)."""
        mx.random.seed((self.config.training.seed * 1_000_003 + step + 7919 * self.ranks.rank) % 2**32)

    def learn(self, step: int, epoch: int, selection: dynamic_sampling.Selection,
              on_phase: Callable[[Phase], None] = lambda p: None,
              held: generation_reuse.HeldStep | None = None) -> StepOutput:
        """The step's scored rollouts (``selection``) -> advantages -> optimiser passes -> its
        metrics and generations. ``held``: the step's share of a generation made earlier
        (``steps_per_generation``), with its advantages and packed micro-batches."""
        cfg = self.config
        G = cfg.grpo.group_size
        generation_s, scoring_s = selection.generation_s, selection.scoring_s
        # The trained batch (examples, completions; all of the step's without dynamic sampling) and
        # what the step generated and scored in every round (generated, all_totals): the reward
        # and length metrics are the latter's, the advantages and the loss the former's.
        examples, completions, totals, padding = selection.trained(G)
        generated, all_totals, per_fn, logged = selection.completions, selection.totals, selection.per_fn, selection.logged
        owners = [selection.examples[c.prompt_index] for c in generated]
        t0 = time.perf_counter()
        advantages = held.advantages if held is not None else grpo_advantages(
            cfg, totals, selection.trained_scores(G), {r.label: r.weight for r in self.rewards})
        stds = group_std(all_totals, G)
        mx.eval(advantages, stds)
        scoring_s += time.perf_counter() - t0
        sampling_metrics = dynamic_sampling.metrics(selection, G) if cfg.grpo.dynamic_sampling else {}
        if cfg.grpo.dynamic_sampling and (short := dynamic_sampling.shortfall(selection, cfg.training.batch_size)):
            self.log("warning", f"step {step}: {short}")

        on_phase("training")
        t0 = time.perf_counter()
        passes = self._optimize(step, examples, completions, advantages.tolist(), padding, held)
        g = cfg.grpo
        if self.ref_model is not None and g.sync_ref_model and step % g.ref_model_sync_steps == 0:
            # TRL syncs at the end of every ref_model_sync_steps-th optimizer step (on each rank alike)
            model_io.mix_into_reference(self.ref_model, self.model, g.ref_model_mixup_alpha)
        training_s = time.perf_counter() - t0

        rank_times, slowest = distributed.timings(self.ranks, generation_s, training_s)
        metrics = step_frame(StepResults(
            step=step, epoch=epoch, completions=generated,
            prompt_tokens=sum(len(owner.prompt_ids) for owner in owners), totals=all_totals, per_fn=per_fn,
            advantages=advantages.tolist(), group_stds=stds.tolist()[::G], passes=passes,
            generation_s=generation_s, scoring_s=scoring_s, training_s=training_s,
            learning_rate=float(self.optimizer.learning_rate.item()),
            peak_memory=mx.get_peak_memory(), active_memory=mx.get_active_memory(), with_kl=cfg.grpo.beta > 0,
            extra_metrics={**logged.metric_means(), **step_output.tool_metrics(self.tools, generated),
                           **_cut_metrics(cfg, selection.examples), **sampling_metrics, **_judge_metrics(self.rewards)},
            ranks=rank_times, slowest_rank=slowest, all_reduce_bytes=self.ranks.comm_bytes,
            trained_tokens=sum(len(examples[c.prompt_index].prompt_ids) + c.model_tokens for c in completions),
        ))  # fmt: skip
        if not metrics.gradients_applied:
            self.log("warning", f"step {step}: {metrics.skipped_reason}")
        live.after_step(self, step, generation_s)
        generations = step_output.generations(owners, generated, all_totals, per_fn,
                                              _advantage_by_completion(selection, advantages.tolist(), G), logged, G,
                                              dropped=selection.dropped)
        return StepOutput(metrics=metrics, generations=generations)

    def _optimize(self, step: int, examples: list[data.Example], completions: list[rollout.Completion],
                  advantages: list[float], padding: list[bool] | None = None,
                  held: generation_reuse.HeldStep | None = None) -> list[PassResult]:
        """``grpo.num_iterations`` optimiser passes over this rank's micro-batches (``held``'s, packed
        when its generation was made)."""
        cfg = self.config
        batches = held.batches if held is not None else micro_batches(
            examples, completions, advantages, padding, cfg, self.plan, self.ranks, self.ref_model)
        # A pure function of the step: a resumed run continues the same sequence.
        self.optimizer.learning_rate = scheduled_lr(step, cfg.training, self.total_steps)
        self.model.train()
        passes = [
            optimize_pass(self.model, self.optimizer, batches, cfg, self.plan,
                          record_old=(k == 0 and cfg.grpo.num_iterations > 1), functions=self.losses,
                          ranks=self.ranks, entropy_coef=self.entropy_coef,
                          num_items=held.num_items if held is not None else None)
            for k in range(cfg.grpo.num_iterations)
        ]
        self.model.eval()
        return passes

    def roll_out(self, step: int, prompts: list[list[int]], positions: list[int],
                 row_tools: list | None = None) -> list[rollout.Completion]:
        """Step ``step``'s ``group_size`` completions of each prompt; ``positions``: each prompt's place in
        the step (a later round's rows continue after the step's), which keys its rows' draws."""
        self.model.eval()  # no LoRA dropout while sampling
        G = self.config.grpo.group_size
        return self.rollout_rows(prompts, G, keys=sampling.step_keys(self.config.training.seed, step, positions, G), row_tools=row_tools)

    def rollout_rows(self, prompts: list[list[int]], n: int, greedy: bool = False,
                 keys: list[int] | None = None, row_tools: list | None = None) -> list[rollout.Completion]:
        """``n`` completions per prompt; ``keys`` (sampling.step_keys) make a row's tokens independent
        of its batch, agent rollouts' included (each row draws at its own position)."""
        if self.tools or row_tools:
            return agent.generate(self.model, self.tokenizer, prompts, n, self.config.generation, self.tools,
                                  greedy=greedy, plan=self.plan, decode=self.decode, keys=keys, row_tools=row_tools)
        return rollout.generate(self.model, self.tokenizer, prompts, n, self.config.generation, greedy=greedy,
                                logprobs=False, plan=self.plan, decode=self.decode, keys=keys)

    def score(self, owners: list[data.Example], completions: list[rollout.Completion], step: int = 1, envs: list | None = None):
        """(weighted sums, per-function scores, what the functions logged) for TRL-style calls; ``envs``: each one's episode."""
        state = TrainerState.before_step(step, self.steps_per_epoch, self.total_steps, self.num_epochs)
        return score_completions(self.rewards, owners, completions, state, self.config.generation.max_completion_length, environments=envs,
                                 with_tools=bool(self.tools or self.environment), warn=lambda message: self.log("warning", message))

    # ------------------------------------------------------------ evaluation

    @property
    def eval_size(self) -> int:
        """Prompts available to ``[eval]``: the eval split, else the training prompts."""
        return len(self.eval_dataset or self.dataset)

    def evaluate_batch(self, indices: list[int], *, greedy: bool, num_samples: int, seed: int | None) -> EvalBatch:
        """Completions for eval prompts ``indices``, scored with the run's rewards. Seeds MLX with
        ``seed`` when given (its own stream: the next training step reseeds from its step)."""
        examples = [(self.eval_dataset or self.dataset)[i] for i in indices]
        if seed is not None:
            mx.random.seed(seed % 2**32)
        self.model.eval()
        if self.rollout_func is not None:  # TRL runs its evaluations through rollout_func too
            examples, completions, owners, episodes = rollout_func.roll(self, 0, examples, range(len(examples)), indices[0], n=num_samples, training=False)
        else:
            examples, episodes = environments.start(self.environment, examples, (seed or 0, -1, indices[0]), num_samples, self.tokenizer)
            completions = self.rollout_rows([e.prompt_ids for e in examples], num_samples, greedy=greedy,
                                        row_tools=environments.row_tools(self.environment, episodes, self.tools, range(len(examples)), num_samples))
            owners = [examples[c.prompt_index] for c in completions]
        totals, per_fn, _ = self.score(owners, completions, 1, environments.instances(episodes, 0))
        totals, per_fn = environments.add_rewards(self.environment, episodes, 0, totals, per_fn, lambda s: self.log("warning", s))
        return EvalBatch(per_fn, totals, [c.model_tokens for c in completions], [c.finish_reason for c in completions])

    # ------------------------------------------------------------ several ranks (distributed.py)

    def leader_value(self, value: int) -> int:
        """Rank 0's ``value`` on every rank (the loop's step-boundary agreement)."""
        return distributed.leader_value(self.ranks, value)

    def sync_from_leader(self, step: int) -> int:
        """Rank 0's weights, optimizer state and step on every rank, after rank 0 resumed."""
        distributed.broadcast_state(self.ranks, self.model, self.optimizer)
        if self.ref_model is not None and self.config.grpo.sync_ref_model:
            distributed.broadcast_weights(self.ranks, self.ref_model)  # rank 0 read the synced reference
        return distributed.leader_value(self.ranks, step)

    def leader_bytes(self, payload: bytes) -> bytes:
        return self.ranks.gather_bytes(payload)[0]  # rank 0's live changes of a boundary

    def live_problem(self, key: str, value: object) -> str | None:
        return live.problem(self, key, value)

    settings_changed = live.changed  # (self, keys): a live change applied

    # ------------------------------------------------------------ checkpoints

    def save_model(self, directory: Path) -> None:
        model_io.save(self.model, self.tokenizer, self.config.model, Path(directory))
        if self.ref_model is not None and self.config.grpo.sync_ref_model:
            # the synced reference is training state: a resume continues with it, not the base model
            mx.save_safetensors(str(Path(directory) / REFERENCE_FILE), dict(tree_flatten(self.ref_model.parameters())))

    def save_optimizer(self, path: Path) -> None:
        mx.save_safetensors(str(path), dict(tree_flatten(self.optimizer.state)))

    def load_checkpoint(self, directory: Path) -> None:
        directory = Path(directory)
        model_io.load_weights(self.model, self.config.model, directory)
        reference = directory / REFERENCE_FILE
        if self.ref_model is not None and self.config.grpo.sync_ref_model and reference.exists():
            self.ref_model.load_weights(str(reference))
            mx.eval(self.ref_model.parameters())
        path = directory / OPTIMIZER_FILE
        if path.exists():
            self.optimizer.state = {}  # the fresh moments go before the saved ones arrive: not both at once
            self.optimizer.state = tree_unflatten(list(mx.load(str(path)).items()))
            self.optimizer.learning_rate = self.config.training.learning_rate
            mx.eval(self.optimizer.state)

