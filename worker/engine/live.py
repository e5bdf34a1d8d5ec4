"""What a live change (docs/steering.md) asks of the engine: whether the loaded model takes it,
and what follows once the config holds it (reward weights, the run's length, compiled functions
built again). The worker checks the value and applies it to the shared ``Config`` first
(``worker/live_changes.py``); these run on the MLX thread, between two steps.
"""

from __future__ import annotations

import time
from typing import Any

from grpo_tui.worker.engine.prompts import data
from grpo_tui.worker.engine.models import model_source
from grpo_tui.worker.engine.accel import fastgen
from grpo_tui.worker.engine.learning.loss import LossFunctions

# What a compiled function bakes in: a change of one drops the traces, built again at the next step.
TRACED_KEYS = ("generation.temperature", "generation.max_completion_length", "grpo.epsilon", "grpo.epsilon_high",
               "grpo.beta")


def problem(trainer: Any, key: str, value: Any) -> str | None:
    """Why the loaded model cannot take ``key`` = ``value`` (None: it can). Reads only what loading
    fixed, so it answers at once, while a step runs. ``trainer``: ``engine.trainer.Trainer`` (it calls here)."""
    if key == "grpo.beta" and value > 0 and trainer.ref_model is None:
        return (f"{value!r} needs a reference model, and none is loaded (the run started with beta = 0); "
                "beta can go down to 0 live, not up from it")
    if key == "generation.max_completion_length":
        context = model_source.context_length(trainer.config.model.path)
        longest = max(len(e.prompt_ids) for e in [*trainer.dataset, *(trainer.eval_dataset or [])])
        if context is not None and longest + value > context:
            return (f"{value} with the longest prompt ({longest} tokens) overflows the model's context "
                    f"({context} positions); at most {context - longest}")
    return None


def changed(trainer: Any, keys: list[str]) -> None:
    """The config now holds the changes of ``keys``: follow them."""
    cfg = trainer.config
    for reward, config in zip(trainer.rewards, cfg.rewards):
        reward.weight = config.weight
    if "training.max_steps" in keys:
        t = cfg.training
        trainer.num_epochs, trainer.total_steps = data.schedule(trainer.steps_per_epoch, t.num_epochs, t.max_steps)
    if any(k in TRACED_KEYS for k in keys):
        trainer.losses = LossFunctions()  # the old traces go; the next step traces the new settings once
        if trainer.decode is not None and "generation.max_completion_length" in keys:
            trainer.decode = fastgen.DecodeStep(trainer.model)
        trainer.retrace_from = time.perf_counter()


def after_step(trainer: Any, step: int, rollout_s: float) -> None:
    """The first step after a change of a traced setting says how long building its functions took."""
    if trainer.retrace_from is None:
        return
    trainer.retrace_from = None
    built = trainer.losses.traced_s
    trainer.log("info", f"step {step}: the compiled loss was built again for the changed settings in {built:.2f} s"
                        + (f" (the rollout, its decode step traced again with it, took {rollout_s:.2f} s)"
                           if trainer.decode is not None else ""))
