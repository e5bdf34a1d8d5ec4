"""One round of a step: roll out ``batch_size`` prompts (this rank's share), score them, and gather
every rank's (docs/architecture.md, "Step data path"). A step without dynamic sampling has one round;
with it, more (``dynamic_sampling``); a reused generation scores its steps' rounds at once
(``generation_reuse``). An evaluation batch is a round too, of greedy or sampled completions.
"""

from __future__ import annotations

import time
from typing import Callable

from grpo_tui.protocol.messages import LogLevel, Phase
from grpo_tui.worker.engine import distributed, dynamic_sampling
from grpo_tui.worker.engine.collaborators import Collaborators
from grpo_tui.worker.engine.policy import rollout_func
from grpo_tui.worker.engine.policy.rollout import Completion
from grpo_tui.worker.engine.prompts import data
from grpo_tui.worker.engine.scoring import timed_calls
from grpo_tui.worker.engine.scoring.environments import Episode
from grpo_tui.worker.trainer_contract import EvalBatch

Rolled = tuple[list[data.Example], list[Completion], list[data.Example], list[Episode] | None]


def report_hung(log: Callable[[LogLevel, str], None]) -> None:
    """A tool or reward function that stays hung, said once (``timed_calls``)."""
    for sentence in timed_calls.take_reports():
        log("warning", sentence)


def roll_out(c: Collaborators, step: int, examples: list[data.Example], rows: range, position: int, *, n: int,
             where: tuple[int, int, int], keys: Callable[[list[int]], list[int]] | None = None,
             greedy: bool = False, training: bool = True) -> Rolled:
    """``rows``' examples rolled out ``n`` times each, by TRL's rollout function or the policy (with
    the environment's episodes and tools): (the round's examples as rolled out, the completions,
    each one's owner, the episodes). ``position``: the first row's place in the step; ``keys``:
    the rows' sampling keys from their places (None: the policy's stream, greedy evaluations)."""
    if c.rollout_function is not None:  # TRL's rollout_func generates (rollout_func.py)
        return rollout_func.roll(c.policy, c.rollout_function, c.ranks, c.prompts.total_steps, step, examples, rows,
                                 position, n=n, training=training)
    examples, episodes = c.scorer.begin(examples, where, n, c.policy.tokenizer)
    places = [position + i for i in rows]
    completions = c.policy.generate([examples[i].prompt_ids for i in rows], n, greedy=greedy,
                                    keys=keys(places) if keys is not None else None,
                                    row_tools=c.scorer.row_tools(episodes, rows, n))
    return examples, completions, [examples[rows.start + x.prompt_index] for x in completions], episodes


def roll_and_score(c: Collaborators, step: int, round_: int, examples: list[data.Example], on_phase: Callable[[Phase], None],
                   rolled: tuple[list[Completion], float] | None = None) -> dynamic_sampling.Round:
    """Roll out and score ``examples`` (this rank's share), then gather every rank's: one round
    of the step. ``rolled``: this rank's completions and their seconds, rolled out with the rest of
    their generation (``generation_reuse``)."""
    cfg = c.config
    G, B = cfg.grpo.group_size, cfg.training.batch_size
    rows = [e.row for e in examples]
    mine = c.ranks.prompts(B, cfg.training.gradient_accumulation_steps)
    episodes = None
    if rolled is not None:
        completions, generation_s = rolled
        owners = [examples[mine.start + x.prompt_index] for x in completions]
    else:
        on_phase("generating")
        t0 = time.perf_counter()
        examples, completions, owners, episodes = roll_out(
            c, step, examples, mine, round_ * B, n=G, where=(cfg.training.seed, step, round_ * B),
            keys=lambda places: c.policy.keys(step, places))
        generation_s = time.perf_counter() - t0
    report_hung(c.log)
    on_phase("scoring")
    t0 = time.perf_counter()
    totals, per_fn, logged = c.scorer.score(owners, completions, c.state(step), episodes, mine.start * G)
    # Every rank's scored completions (and what its reward functions logged), so what follows
    # sees the whole round on every rank.
    completions, totals, per_fn, logged = distributed.gather_scored(c.ranks, completions, totals, per_fn, logged, mine.start)
    scoring_s = time.perf_counter() - t0
    report_hung(c.log)
    if c.prompts.curriculum is not None:  # every rank's scores: every rank's curriculum draws alike
        c.prompts.curriculum.observe(step, round_, rows, totals)
    return dynamic_sampling.Round(examples, completions, totals, per_fn, logged, generation_s, scoring_s)


def evaluate(c: Collaborators, indices: list[int], *, greedy: bool, num_samples: int, seed: int | None) -> EvalBatch:
    """Completions for eval prompts ``indices``, scored with the run's rewards. Seeds MLX with
    ``seed`` when given (its own stream: the next training step reseeds from its step)."""
    import mlx.core as mx

    examples = [c.prompts.eval_rows[i] for i in indices]
    if seed is not None:
        mx.random.seed(seed % 2**32)
    # TRL runs its evaluations through rollout_func too; an environment's episodes are the same at
    # every evaluation (step -1, the eval index)
    examples, completions, owners, episodes = roll_out(c, 0, examples, range(len(examples)), indices[0], n=num_samples,
                                                       where=(seed or 0, -1, indices[0]), greedy=greedy, training=False)
    totals, per_fn, _ = c.scorer.score(owners, completions, c.state(1), episodes, 0)
    return EvalBatch(per_fn, totals, [x.model_tokens for x in completions], [x.finish_reason for x in completions])
