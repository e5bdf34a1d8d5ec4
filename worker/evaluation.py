"""Evaluation on the held-out prompts: when it runs and what it reports, as pure functions.

The engine generates the completions batch by batch (so the worker answers commands between
batches); this module decides the schedule and folds the scored batches into one ``Eval`` result:
each reward's mean, the accuracy reward's mean (when one is configured) and, with
``num_samples`` = k > 1, pass@k — the share of prompts with at least one correct sample.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from collections.abc import Awaitable
from typing import Callable

from grpo_tui.protocol import messages as m
from grpo_tui.protocol.messages import mean_of
from grpo_tui.worker.context import RunContext
from grpo_tui.worker.trainer_contract import EvalBatch, Trainer

CORRECT = 1.0 - 1e-9  # an accuracy score at least this counts as a correct answer


def due(step: int, total_steps: int, every: int, at_start: bool, at_end: bool) -> bool:
    """Whether to evaluate once ``step`` steps are done (step 0: before the first update)."""
    if step == 0:
        return at_start
    if step == total_steps and at_end:
        return True
    return every > 0 and step % every == 0


def eval_seed(seed: int, step: int) -> int:
    """The MLX seed of the evaluation at ``step``: its own stream, so the same eval samples the same
    way after a resume. (Each training step reseeds from (seed, step), so an evaluation between
    steps leaves the training stream as it was.)"""
    return (seed * 1_000_003 + step + 0x5EED_E7A1) % 2**32


def chunks(count: int, size: int) -> list[range]:
    """``range(count)`` in consecutive pieces of at most ``size`` (the yield points)."""
    size = max(1, size)
    return [range(i, min(count, i + size)) for i in range(0, count, size)]


@dataclass
class EvalTally:
    """Scores accumulated over the batches of one evaluation, prompt by prompt."""

    num_samples: int
    accuracy_label: str | None = None
    scores: dict[str, list[float | None]] = field(default_factory=dict)
    totals: list[float | None] = field(default_factory=list)
    lengths: list[int] = field(default_factory=list)
    finish: list[str] = field(default_factory=list)
    prompts: int = 0

    def add(self, per_fn: dict[str, list[float | None]], totals: list[float | None], lengths: list[int],
            finish: list[str]) -> None:
        """One batch: ``num_samples`` consecutive completions per prompt."""
        for label, values in per_fn.items():
            self.scores.setdefault(label, []).extend(values)
        self.totals.extend(totals)
        self.lengths.extend(lengths)
        self.finish.extend(finish)
        self.prompts += len(totals) // max(1, self.num_samples)

    def summary(self, step: int = 0, greedy: bool = True, seconds: float = 0.0) -> m.Eval:
        """The ``eval`` frame: each reward's mean, the total's, accuracy, pass@k, lengths, counts."""
        k = max(1, self.num_samples)
        accuracy = pass_at_k = None
        if self.accuracy_label is not None and self.accuracy_label in self.scores:
            acc = self.scores[self.accuracy_label]
            accuracy = mean_of(acc)
            if k > 1:
                groups = [acc[i : i + k] for i in range(0, len(acc), k)]
                judged = [g for g in groups if any(v is not None for v in g)]
                if judged:
                    pass_at_k = sum(any(v is not None and v >= CORRECT for v in g) for g in judged) / len(judged)
        return m.Eval(
            step=step,
            rewards={label: mean_of(values) for label, values in self.scores.items()},
            reward=mean_of(self.totals),
            accuracy=accuracy,
            pass_at_k=pass_at_k,
            num_prompts=self.prompts,
            num_samples=k,
            greedy=greedy,
            completion_mean_length=mean_of([float(n) for n in self.lengths]),
            clipped_ratio=(sum(f != "stop" for f in self.finish) / len(self.finish)) if self.finish else None,
            seconds=seconds,
        )


async def run_eval(run: RunContext, step: int, between_batches: Callable[[], Awaitable[None]]) -> list[m.Eval] | None:
    """Evaluate after ``step`` steps on the MLX thread, one batch at a time: one ``Eval`` per pass
    (greedy, then sampled with ``also_sampled``). Between batches ``between_batches`` handles a
    requested save or pause, and a stop abandons the evaluation (None)."""
    cfg, trainer = run.config.eval, run.trainer
    assert cfg is not None  # the loop evaluates only with an [eval] section
    count = trainer.eval_size if cfg.limit <= 0 else min(cfg.limit, trainer.eval_size)
    accuracy = run.config.accuracy_label
    parts = chunks(count, cfg.batch_size)
    passes = cfg.passes()
    results = []
    for greedy, num_samples in passes:
        tally = EvalTally(num_samples=num_samples, accuracy_label=accuracy)
        started = time.perf_counter()
        how = "" if len(passes) == 1 else (" greedy" if greedy else " sampled")
        for i, part in enumerate(parts):
            run.phase = "evaluating"
            run.emit(m.Status(phase="evaluating", message=f"evaluating{how} at step {step}: batch {i + 1}/{len(parts)}"))
            seed = eval_seed(run.config.training.seed, step) + i
            batch = await run.mlx(_one_batch, trainer, list(part), greedy, num_samples, seed)
            tally.add(batch.per_fn, batch.totals, batch.lengths, batch.finish)
            run.phase = "idle"
            await between_batches()
            if run.control.stop_reason is not None:
                run.log("info", f"evaluation at step {step} abandoned: the run is stopping")
                return None
        results.append(tally.summary(step, greedy, time.perf_counter() - started))
    return results


def _one_batch(trainer: Trainer, indices: list[int], greedy: bool, num_samples: int, seed: int) -> EvalBatch:
    return trainer.evaluate_batch(indices, greedy=greedy, num_samples=num_samples, seed=seed)
