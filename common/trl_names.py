"""A step's and an evaluation's metrics under the names TRL's ``GRPOTrainer`` logs them with, for
``GRPOTrainer.state.log_history`` (the Python API) and the trackers (W&B, Trackio, TensorBoard).

TRL's own names where it has the metric (``reward``, ``reward_std``, ``rewards/<name>/mean``,
``kl``, ``entropy``, ``clip_ratio/low_mean``, ``completions/mean_length``, ``grad_norm``, ...);
grpo-tui's extras (timings, tokens/s, memory, what reward functions logged) keep their own names.
The metrics TRL logs that the frame has no field for travel in ``extra_metrics`` under TRL's names
(the worker's ``step_output``: ``rewards/<name>/std``, ``completions/*_terminated_length``,
``clip_ratio/low_min``, ...). Missing and non-finite values are left out, as TRL leaves out what
it did not measure.
"""

from __future__ import annotations

import math
import statistics

from grpo_tui.protocol.messages import Eval, Step


def _put(out: dict[str, float], name: str, value: float | int | None) -> None:
    if value is not None and math.isfinite(value):
        out[name] = float(value)


def step_metrics(step: Step) -> dict[str, float]:
    """One ``step`` frame as TRL's training log entry (without ``step`` and ``epoch``)."""
    out: dict[str, float] = {}
    _put(out, "loss", step.loss)
    _put(out, "grad_norm", step.grad_norm)
    _put(out, "learning_rate", step.learning_rate)
    _put(out, "num_tokens", step.num_tokens)
    _put(out, "completions/mean_length", step.completion_mean_length)
    _put(out, "completions/min_length", step.completion_min_length)
    _put(out, "completions/max_length", step.completion_max_length)
    _put(out, "completions/clipped_ratio", step.completion_clipped_ratio)
    for name, value in step.rewards.items():
        _put(out, f"rewards/{name}/mean", value)
    _put(out, "reward", step.reward)
    # TRL 1.16's reward_std is the whole batch's (nanstd); the frame's own is the mean within groups
    scored = [r for r in step.completion_rewards if r is not None and math.isfinite(r)]
    _put(out, "reward_std", statistics.stdev(scored) if len(scored) > 1 else None)
    _put(out, "frac_reward_zero_std", step.frac_reward_zero_std)
    _put(out, "kl", step.kl)
    _put(out, "entropy", step.entropy)
    _put(out, "perplexity", step.perplexity)
    _put(out, "mean_token_accuracy", step.token_accuracy)  # TRL's SFTTrainer's name
    _put(out, "clip_ratio/low_mean", step.clip_ratio.low)
    _put(out, "clip_ratio/high_mean", step.clip_ratio.high)
    _put(out, "clip_ratio/region_mean", step.clip_ratio.region)
    _put(out, "advantage_std", step.advantage_std)
    _put(out, "generation_tokens_per_s", step.generation_tokens_per_s)
    _put(out, "training_tokens_per_s", step.training_tokens_per_s)
    seconds = [ms for ms in (step.generation_ms, step.scoring_ms, step.training_ms) if ms is not None]
    _put(out, "step_time", sum(seconds) / 1000 if seconds else None)
    _put(out, "peak_memory_mb", step.peak_memory_mb)
    for name, value in step.extra_metrics.items():
        _put(out, name, value)
    return out


def eval_metrics(result: Eval) -> dict[str, float]:
    """One ``eval`` frame as TRL's evaluation log entry, without the ``eval_`` prefix."""
    out: dict[str, float] = {}
    for name, value in result.rewards.items():
        _put(out, f"rewards/{name}/mean", value)
    _put(out, "reward", result.reward)
    _put(out, "accuracy", result.accuracy)
    _put(out, f"pass@{result.num_samples}", result.pass_at_k if result.num_samples > 1 else None)
    _put(out, "completions/mean_length", result.completion_mean_length)
    _put(out, "completions/clipped_ratio", result.clipped_ratio)
    _put(out, "runtime", result.seconds)
    return out


class StepWindow:
    """TRL's ``logging_steps``: every ``every`` steps (and at the last step), the mean of each metric
    over the steps since the last entry; ``first``: step 1 too (``logging_first_step``)."""

    def __init__(self, every: int, total: int = 0, *, first: bool = False) -> None:
        self.every = max(1, every)
        self.total = total
        self.first = first
        self._sums: dict[str, float] = {}
        self._counts: dict[str, int] = {}
        self._tokens: dict[int, int] = {}  # each step's tokens, by step (a step seen again replaces its own)
        self._tokens_seen = 0  # their total (and the resumed steps'): TRL's num_tokens, the run's so far

    def resume(self, step: int, total_tokens: int = 0) -> None:
        """The run goes on after ``step``: the steps after it seen so far are abandoned;
        ``total_tokens``: the tokens of steps up to it, when known (the store's), else those seen."""
        gone = sum(tokens for s, tokens in self._tokens.items() if s > step)
        self._tokens = {s: tokens for s, tokens in self._tokens.items() if s <= step}
        self._tokens_seen = total_tokens or self._tokens_seen - gone

    def add(self, step: Step) -> dict[str, float] | None:
        """Add one step; the entry to log when this step is a logging step, else None."""
        self._tokens_seen += step.num_tokens - self._tokens.get(step.step, 0)
        self._tokens[step.step] = step.num_tokens
        for name, value in step_metrics(step).items():
            if name == "num_tokens":
                continue  # TRL's is the run's total so far, not a mean
            self._sums[name] = self._sums.get(name, 0.0) + value
            self._counts[name] = self._counts.get(name, 0) + 1
        if step.step % self.every and step.step != self.total and not (self.first and step.step == 1):
            return None
        entry = {name: total / self._counts[name] for name, total in self._sums.items()}
        entry["num_tokens"] = float(self._tokens_seen)
        self._sums, self._counts = {}, {}
        return entry
