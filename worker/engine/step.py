"""One GRPO step, top to bottom (docs/architecture.md, "The step's spine"): the step's prompts ->
the policy rolls them out -> the scorer scores them -> advantages -> the learner updates the
weights -> the step's record (its ``step`` metrics and every generation). Each stage is a call on
one collaborator (``collaborators.Collaborators``); this file only orders them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

import mlx.core as mx

from grpo_tui.protocol.messages import Phase
from grpo_tui.worker.engine import distributed, dynamic_sampling, generation_reuse, scored_round, step_output
from grpo_tui.worker.engine.collaborators import Collaborators
from grpo_tui.worker.engine.dynamic_sampling import Selection
from grpo_tui.worker.engine.generation_reuse import HeldStep
from grpo_tui.worker.engine.learning.grpo import advantages as grpo_advantages, group_std
from grpo_tui.worker.engine.step_output import StepResults, step_frame
from grpo_tui.worker.trainer_contract import StepOutput

Phases = Callable[[Phase], None]  # hears "generating", "scoring" and "training" as they begin


@dataclass(frozen=True)
class Sampled:
    """Where an [async] step's rollouts came from: the learner step whose weights sampled them, and
    the step's figures the generator and the link add (``async/*``, the scorer's own)."""

    policy_step: int
    metrics: dict[str, float]


def train_step(c: Collaborators, step: int, held: dict[int, HeldStep], on_phase: Phases) -> StepOutput:
    """Train ``step``. ``held``: the later steps' shares of a generation made earlier
    (``steps_per_generation``), kept by the caller across steps."""
    cfg = c.config
    c.begin_step(step)
    epoch, _, indices = c.prompts.batch(step)
    if cfg.training.steps_per_generation > 1:  # this step's share of a generation (generation_reuse.py)
        if step not in held:
            held.clear()
            held.update(generation_reuse.generate(c, step, on_phase))
        share = held.pop(step)
        return learn(c, step, epoch, share.selection, on_phase, share)
    return learn(c, step, epoch, scored_step(c, step, indices, on_phase), on_phase)


def scored_step(c: Collaborators, step: int, indices: list[int], on_phase: Phases) -> Selection:
    """The step's rollouts, scored: round 0 has the step's own prompts (``indices``); with dynamic
    sampling, more rounds until the groups teach. [async]'s generator runs this for the learner."""
    cfg = c.config
    rounds = [scored_round.roll_and_score(c, step, 0, c.prompts.examples(indices), on_phase)]
    used = set(indices)
    while (more := dynamic_sampling.next_round(step, rounds, used, c.prompts.dataset_size, cfg, c.prompts.curriculum)) is not None:
        rounds.append(scored_round.roll_and_score(c, step, len(rounds), c.prompts.examples(more), on_phase))
    return dynamic_sampling.select(rounds, cfg.grpo.group_size, cfg.training.batch_size, cfg.grpo.dynamic_sampling)


def learn(c: Collaborators, step: int, epoch: int, selection: Selection, on_phase: Phases = lambda p: None,
          held: HeldStep | None = None, sampled: Sampled | None = None) -> StepOutput:
    """The step's scored rollouts (``selection``) -> advantages -> the learner's passes -> the step's
    metrics and generations. ``held``: the step's share of an earlier generation, with its
    advantages and packed micro-batches. ``sampled``: [async]'s account of where the rollouts came
    from (the policy step that sampled them, the generator's own figures)."""
    cfg, G = c.config, c.config.grpo.group_size
    # The trained batch (all of the step's completions without dynamic sampling) and everything
    # the step generated and scored: the reward and length metrics are the latter's, the
    # advantages and the loss the former's.
    examples, completions, totals, padding = selection.trained(G)
    generated = selection.completions
    owners = [selection.examples[x.prompt_index] for x in generated]
    t0 = time.perf_counter()
    advantages = held.advantages if held is not None else grpo_advantages(
        cfg, totals, selection.trained_scores(G), c.scorer.weights)
    stds = group_std(selection.totals, G)
    mx.eval(advantages, stds)
    scoring_s = selection.scoring_s + time.perf_counter() - t0
    if cfg.grpo.dynamic_sampling and (short := dynamic_sampling.shortfall(selection, cfg.training.batch_size)):
        c.log("warning", f"step {step}: {short}")

    on_phase("training")
    t0 = time.perf_counter()
    batches = held.batches if held is not None else c.learner.pack(examples, completions, advantages.tolist(), padding)
    passes = c.learner.learn(step, batches, c.prompts.total_steps, held.num_items if held is not None else None)
    training_s = time.perf_counter() - t0

    rank_times, slowest = distributed.timings(c.ranks, selection.generation_s, training_s)
    chosen = c.prompts.curriculum
    visits, pool = chosen.commit(step, cfg.curriculum) if chosen is not None else ([], {})
    metrics = step_frame(StepResults(
        step=step, epoch=epoch, completions=generated,
        prompt_tokens=sum(len(owner.prompt_ids) for owner in owners), totals=selection.totals, per_fn=selection.per_fn,
        advantages=advantages.tolist(), group_stds=stds.tolist()[::G], passes=passes,
        generation_s=selection.generation_s, scoring_s=scoring_s, training_s=training_s,
        learning_rate=c.learner.learning_rate, peak_memory=mx.get_peak_memory(), active_memory=mx.get_active_memory(),
        with_kl=cfg.grpo.beta > 0, extra_metrics={**step_output.extra_metrics(cfg, selection, c.scorer, G), **pool,
                                                  **(sampled.metrics if sampled is not None else {})},
        ranks=rank_times, slowest_rank=slowest, all_reduce_bytes=c.ranks.comm_bytes,
        trained_tokens=sum(len(examples[x.prompt_index].prompt_ids) + x.model_tokens for x in completions),
    ))  # fmt: skip
    if not metrics.gradients_applied:
        c.log("warning", f"step {step}: {metrics.skipped_reason}")
    c.learner.retraced(step, selection.generation_s, c.policy.decode is not None)
    generations = step_output.generations(owners, generated, selection.totals, selection.per_fn,
                                          step_output.advantage_by_completion(selection, advantages.tolist(), G),
                                          selection.logged, G, dropped=selection.dropped,
                                          policy_step=sampled.policy_step if sampled is not None else step - 1)
    return StepOutput(metrics=metrics, generations=generations, prompt_visits=visits)
