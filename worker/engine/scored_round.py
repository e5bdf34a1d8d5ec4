"""One round of a step: roll out ``batch_size`` prompts (this rank's share), score them, and gather
every rank's (docs/architecture.md, "Step data path"). A step without dynamic sampling has one round;
with it, more (``dynamic_sampling``); a reused generation scores its steps' rounds at once
(``generation_reuse``)."""

from __future__ import annotations

import time
from typing import Any, Callable

from grpo_tui.protocol.messages import LogLevel, Phase
from grpo_tui.worker.engine.prompts import data
from grpo_tui.worker.engine import distributed, dynamic_sampling
from grpo_tui.worker.engine.scoring import environments, timed_calls
from grpo_tui.worker.engine.policy import rollout_func
from grpo_tui.worker.engine.policy.rollout import Completion


def report_hung(log: Callable[[LogLevel, str], None]) -> None:
    """A tool or reward function that stays hung, said once (``timed_calls``)."""
    for sentence in timed_calls.take_reports():
        log("warning", sentence)


def roll_and_score(trainer: Any, step: int, round_: int, examples: list[data.Example], on_phase: Callable[[Phase], None],
                   rolled: tuple[list[Completion], float] | None = None) -> dynamic_sampling.Round:
    """Roll out and score ``examples`` (this rank's share), then gather every rank's: one round
    of the step. ``trainer``: ``engine.trainer.Trainer`` (it calls here).
    ``rolled``: this rank's completions and their seconds, rolled out with the rest of their
    generation (``generation_reuse``)."""
    cfg = trainer.config
    mine = trainer.ranks.prompts(len(examples), cfg.training.gradient_accumulation_steps)
    episodes = None
    if rolled is not None:
        completions, generation_s = rolled
    else:
        on_phase("generating")
        t0 = time.perf_counter()
        if trainer.rollout_func is not None:  # TRL's rollout_func generates (rollout_func.py)
            examples, completions, owners, episodes = rollout_func.roll(trainer, step, examples, mine, round_ * cfg.training.batch_size, n=cfg.grpo.group_size)
        else:
            examples, episodes = environments.start(trainer.environment, examples, (cfg.training.seed, step, round_ * cfg.training.batch_size),
                                                    cfg.grpo.group_size, trainer.tokenizer)
            completions = trainer.roll_out(step, [examples[i].prompt_ids for i in mine], [round_ * cfg.training.batch_size + i for i in mine],
                                           environments.row_tools(trainer.environment, episodes, trainer.tools, mine, cfg.grpo.group_size))
        generation_s = time.perf_counter() - t0
    if trainer.rollout_func is None:
        owners = [examples[mine.start + c.prompt_index] for c in completions]
    report_hung(trainer.log)
    on_phase("scoring")
    t0 = time.perf_counter()
    totals, per_fn, logged = trainer.score(owners, completions, step, environments.instances(episodes, mine.start * cfg.grpo.group_size))
    totals, per_fn = environments.add_rewards(trainer.environment, episodes, mine.start * cfg.grpo.group_size, totals, per_fn,
                                              lambda message: trainer.log("warning", message))
    # Every rank's scored completions (and what its reward functions logged), so what follows
    # sees the whole round on every rank.
    completions, totals, per_fn, logged = distributed.gather_scored(
        trainer.ranks, completions, totals, per_fn, logged, mine.start
    )
    scoring_s = time.perf_counter() - t0
    report_hung(trainer.log)
    return dynamic_sampling.Round(examples, completions, totals, per_fn, logged, generation_s, scoring_s)
