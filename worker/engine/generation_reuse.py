"""One generation for several steps (``training.steps_per_generation``; TRL's ``steps_per_generation``
and ``generation_batch_size``), docs/config.md, "[training]".

The run's steps fall in blocks of N (steps 1..N, N+1..2N, ...). The first step of a block that runs
rolls out and scores the prompts of each of the block's steps: each step's own batch in the run's
data order, each with the sampling keys that step would use, all with the policy of that moment
(in one batch, unless an environment or a rollout function generates: a step at a time).
The advantages are computed over the whole generation (a group's from its own rewards;
``scale_rewards = "batch"`` and ``normalize_then_sum`` over the generation, as TRL's generation
batch). Every step's micro-batches are packed then, with the reference's log-probabilities and, for
the steps after the first, the sampling policy's (TRL's ``old_per_token_logps``): those steps train
off-policy, their importance ratio against the policy that sampled them, clipped by ``epsilon`` as
usual. The loss types normalised by the batch's tokens (``dapo``, ``cispo``, ``vespo``) divide by
the generation's tokens per step, as TRL does.

A resume inside a block generates afresh for the block's remaining steps (TRL regenerates after a
resume too); a live change of a ``generation.*`` key, ``grpo.scale_rewards`` or a reward's weight
applies from the next generation (the loss's keys, read when a step trains, from the next step).
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

import mlx.core as mx
import mlx.nn as nn

from grpo_tui.protocol.config import Config
from grpo_tui.protocol.messages import Phase
from grpo_tui.worker.engine import dynamic_sampling, scored_round
from grpo_tui.worker.engine.collaborators import Collaborators
from grpo_tui.worker.engine.dynamic_sampling import Selection
from grpo_tui.worker.engine.learning import grpo
from grpo_tui.worker.engine.learning.batch import MicroBatch
from grpo_tui.worker.engine.learning.logps import token_logps
from grpo_tui.worker.engine.models.plan import EnginePlan

if TYPE_CHECKING:
    from grpo_tui.worker.engine.prompts.data import Example
    from grpo_tui.worker.engine.policy.rollout import Completion


@dataclass
class HeldStep:
    """A step's share of a generation: its scored completions, their advantages, this rank's
    micro-batches (packed, with the sampling policy's log-probabilities after the block's first
    step) and the token count the batch-normalised losses divide by."""

    selection: Selection
    advantages: mx.array
    batches: list[MicroBatch]
    num_items: float


def block(step: int, steps_per_generation: int, total_steps: int) -> range:
    """The steps a generation made at ``step`` feeds: from ``step`` to the end of its block of
    ``steps_per_generation`` (a resume inside a block: the block's remaining steps), not past the
    run's last step."""
    end = ((step - 1) // steps_per_generation + 1) * steps_per_generation
    return range(step, max(step, min(end, total_steps)) + 1)


def split(values: list, sizes: list[int]) -> list[list]:
    """``values`` cut into consecutive runs of ``sizes``."""
    out, start = [], 0
    for size in sizes:
        out.append(values[start : start + size])
        start += size
    return out


def record_sampling_logps(model: nn.Module, batches: list[MicroBatch], config: Config, plan: EnginePlan) -> None:
    """Each batch's ``old_logps``: its completions' log-probabilities under ``model`` now, the
    policy that sampled them (before any of the generation's updates)."""
    model.eval()
    for batch in batches:
        logps = token_logps(model, batch, config.generation.temperature, plan.head, plan.vocab_chunk_size).logps
        batch.old_logps = mx.stop_gradient(logps)
        mx.eval(batch.old_logps)


def generate(c: Collaborators, step: int, on_phase: Callable[[Phase], None]) -> dict[int, HeldStep]:
    """Roll out and score the prompts of ``step``'s block of steps, each step's with its own batch
    and keys; the advantages over the whole generation; every step's micro-batches, the later
    steps' with the sampling policy's log-probabilities. Each step's share, by step."""
    cfg, G = c.config, c.config.grpo.group_size
    steps = block(step, cfg.training.steps_per_generation, c.prompts.total_steps)
    prompts = {s: c.prompts.examples(c.prompts.batch(s)[2]) for s in steps}
    plain = c.scorer.environment is None and c.rollout_function is None
    rolled = _roll_out(c, prompts, on_phase) if plain else {}
    selections = []
    for s in steps:
        c.policy.seed(s)
        round_ = scored_round.roll_and_score(c, s, 0, prompts[s], on_phase, rolled.get(s))
        selections.append(dynamic_sampling.select([round_], G, cfg.training.batch_size, False))
    c.policy.seed(step)
    t0 = time.perf_counter()
    trained = [sel.trained(G) for sel in selections]
    scores = [sel.trained_scores(G) for sel in selections]
    advantages = grpo.advantages(cfg, [t for _, _, totals, _ in trained for t in totals],
                                 {label: [v for part in scores for v in part[label]] for label in scores[0]},
                                 c.scorer.weights).tolist()
    by_step = split(advantages, [len(totals) for _, _, totals, _ in trained])
    batches = [c.learner.pack(examples, completions, adv, padding)
               for (examples, completions, _, padding), adv in zip(trained, by_step)]
    for later in batches[1:]:
        record_sampling_logps(c.policy.model, later, cfg, c.policy.plan)
    tokens = sum(float(mx.sum(b.mask).item()) for part in batches for b in part)
    num_items = c.ranks.sum_floats([tokens])[0] / len(steps)  # TRL: the generation's tokens per step
    selections[0].scoring_s += time.perf_counter() - t0
    return {s: HeldStep(sel, mx.array(adv, dtype=mx.float32), part, num_items)
            for s, sel, adv, part in zip(steps, selections, by_step, batches)}


def _roll_out(c: Collaborators, prompts: dict[int, list[Example]],
              on_phase: Callable[[Phase], None]) -> dict[int, tuple[list[Completion], float]]:
    """One rollout of this rank's rows of every step of the generation, in one batch: each row is
    keyed by its own step and place, so it samples what a rollout per step would. Each step's
    completions (``prompt_index`` within the step's share) and its part of the time, by tokens."""
    cfg, G = c.config, c.config.grpo.group_size
    mine = c.ranks.prompts(cfg.training.batch_size, cfg.training.gradient_accumulation_steps)
    rows = [examples[i].prompt_ids for examples in prompts.values() for i in mine]
    keys = [k for s in prompts for k in c.policy.keys(s, list(mine))]
    on_phase("generating")
    t0 = time.perf_counter()
    completions = c.policy.generate(rows, G, keys=keys)
    seconds = time.perf_counter() - t0
    total = max(sum(x.model_tokens for x in completions), 1)
    out = {}
    for k, s in enumerate(prompts):
        part = [dataclasses.replace(x, prompt_index=x.prompt_index - k * len(mine))
                for x in completions if k * len(mine) <= x.prompt_index < (k + 1) * len(mine)]
        out[s] = (part, seconds * sum(x.model_tokens for x in part) / total)
    return out
