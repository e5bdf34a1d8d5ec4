"""A training step's output, assembled in one place from what the step produced: the ``step``
frame's metrics (TRL's names) from its completions and their scores, the optimiser's passes, the
phases' times and the memory (``step.learn`` gathers ``StepResults``; ``step_frame`` turns
them into a ``Step``), and the step's generations for the store (``generations``). No MLX here:
the step hands over plain numbers.
"""

from __future__ import annotations

import math

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from grpo_tui.protocol.messages import LOSS_METRICS, ClipRatio, RankTiming, Step, finite, mean_of
from grpo_tui.worker.engine import dynamic_sampling
from grpo_tui.worker.engine.policy.agent import tool_calls
from grpo_tui.worker.engine.prompts.data import Example
from grpo_tui.worker.engine.policy.parsing import parse_tool_calls, split_thinking
from grpo_tui.worker.engine.scoring.reward_call import StepLog
from grpo_tui.worker.engine.policy.rollout import Completion
from grpo_tui.worker.engine.learning.update import PassResult
from grpo_tui.worker.trainer_contract import Generation

if TYPE_CHECKING:
    from grpo_tui.protocol.config import Config
    from grpo_tui.worker.engine.dynamic_sampling import Selection
    from grpo_tui.worker.engine.scoring.scorer import Scorer

MB = 1024 * 1024


@dataclass
class StepResults:
    """What one training step produced, on every rank (the whole batch)."""

    step: int
    epoch: int
    completions: list[Completion]
    prompt_tokens: int  # the owning prompt's tokens, summed over the completions
    totals: list[float | None]  # each completion's weighted reward (None: no function applied)
    per_fn: dict[str, list[float | None]]  # each reward function's scores
    advantages: list[float]
    group_stds: list[float]  # each group's reward standard deviation
    passes: list[PassResult]  # one per GRPO iteration
    generation_s: float
    scoring_s: float
    training_s: float
    learning_rate: float
    peak_memory: int  # bytes, since the step began
    active_memory: int  # bytes, at the end of the step
    with_kl: bool  # grpo.beta > 0
    extra_metrics: dict[str, float]  # what the reward functions logged, and the tool metrics
    ranks: list[RankTiming]
    slowest_rank: int | None
    all_reduce_bytes: int
    trained_tokens: int | None = None  # dynamic sampling: the trained batch's tokens (else every completion's)


def skipped_reasons(passes: list[PassResult]) -> list[str]:
    """Why each skipped pass skipped its update (named by pass when there are several)."""
    n = len(passes)
    return [f"{p.skipped_reason} (pass {i + 1}/{n})" if n > 1 else str(p.skipped_reason)
            for i, p in enumerate(passes) if not p.applied]


def batch_metrics(r: StepResults) -> dict[str, float]:
    """TRL's metrics of the scored batch that only its log shows (in extra_metrics, under TRL's
    names): each reward function's standard deviation (TRL's nanstd: Bessel-corrected, None left
    out; with fewer than two scores NaN there, absent here), and the lengths of the completions that
    ended on their own (``stop``; TRL's EOS), 0 when none did, as TRL gives."""
    out = {}
    for label, values in r.per_fn.items():
        scored = [v for v in values if v is not None and math.isfinite(v)]
        if len(scored) > 1:
            out[f"rewards/{label}/std"] = float(np.std(scored, ddof=1))
    ended = [c.model_tokens for c in r.completions if c.finish_reason == "stop"] or [0]
    out["completions/mean_terminated_length"] = float(np.mean(ended))
    out["completions/min_terminated_length"] = float(min(ended))
    out["completions/max_terminated_length"] = float(max(ended))
    return out


def step_frame(r: StepResults) -> Step:
    """The ``step`` frame of ``r``."""
    passes, completions = r.passes, r.completions
    lengths = [c.model_tokens for c in completions]  # the model's own tokens, not tool results
    skipped = skipped_reasons(passes)
    stats = {k: float(np.mean([p.stats.get(k, 0.0) for p in passes])) for k in passes[0].stats}
    first = passes[0].stats  # the policy that sampled the completions (num_iterations > 1 moves it)
    group_stds = np.array(r.group_stds)
    tokens = r.prompt_tokens + sum(lengths)
    return Step(
        step=r.step,
        epoch=r.epoch,
        loss=finite(float(np.mean([p.loss for p in passes]))),
        reward=mean_of(r.totals),
        reward_std=float(group_stds.mean()),
        frac_reward_zero_std=float(np.mean(np.isclose(group_stds, 0.0))),
        rewards={label: mean_of(values) for label, values in r.per_fn.items()},
        advantage_std=float(np.std(r.advantages)),
        kl=finite(stats.get("kl")) if r.with_kl else None,
        entropy=finite(stats.get("entropy")),
        clip_ratio=ClipRatio(
            low=stats.get("clip_ratio_low"), high=stats.get("clip_ratio_high"), region=stats.get("clip_ratio_region")
        ),
        completion_mean_length=float(np.mean(lengths)),
        completion_min_length=float(min(lengths)),
        completion_max_length=float(max(lengths)),
        completion_clipped_ratio=float(np.mean([c.finish_reason != "stop" for c in completions])),
        completion_rewards=[finite(t) for t in r.totals],
        num_tokens=tokens,
        generation_ms=r.generation_s * 1000,
        scoring_ms=r.scoring_s * 1000,
        training_ms=r.training_s * 1000,
        generation_tokens_per_s=sum(lengths) / max(r.generation_s, 1e-9),
        training_tokens_per_s=(tokens if r.trained_tokens is None else r.trained_tokens) * len(passes)
        / max(r.training_s, 1e-9),
        grad_norm=finite(passes[-1].grad_norm),
        learning_rate=r.learning_rate,
        peak_memory_mb=r.peak_memory / MB,
        active_memory_mb=r.active_memory / MB,
        gradients_applied=not skipped,
        skipped_reason="; ".join(skipped) or None,
        extra_metrics={**r.extra_metrics, **batch_metrics(r), **{k: stats[k] for k in LOSS_METRICS if k in stats}},
        perplexity=finite(math.exp(min(first["nll"], 700.0))) if "nll" in first else None,
        token_accuracy=finite(first.get("token_accuracy")),
        ranks=r.ranks,
        slowest_rank=r.slowest_rank,
        all_reduce_bytes=r.all_reduce_bytes,
    )



def generations(owners: list[Example], completions: list[Completion], totals: list[float | None],
                per_fn: dict[str, list[float | None]], advantages: list[float], logged: StepLog, group_size: int,
                dropped: set[int] | None = None, policy_step: int | None = None) -> list[Generation]:
    """The step's generations as the store keeps them: each completion with its prompt (``owners``),
    scores, advantage and what the reward functions noted; ``dropped``: the prompts not trained on."""
    out = []
    for i, (ex, c) in enumerate(zip(owners, completions)):
        thinking, answer = split_thinking(c.text)
        out.append(
            Generation(
                prompt_index=c.prompt_index,
                group_index=i % group_size,
                prompt=ex.prompt_text,
                completion=answer,
                raw_completion=c.transcript if c.transcript is not None else c.text,
                thinking=thinking,
                reward=totals[i],
                reward_details={label: values[i] for label, values in per_fn.items()},
                advantage=advantages[i],
                num_tokens=c.model_tokens,
                finish_reason=c.finish_reason,  # type: ignore[arg-type]  # the rollout says stop, length or repetition
                tool_calls=tool_calls(c.turns) if c.turns else parse_tool_calls(answer),
                reward_notes=logged.notes(i),
                turns=list(c.turns),
                dropped=dropped is not None and c.prompt_index in dropped,
                policy_step=policy_step,
            )
        )
    return out


def tool_metrics(tools: list, completions: list[Completion]) -> dict[str, float]:
    """Per-step tool metrics (in ``extra_metrics``), TRL's where it has them: calls per completion
    (``tools/call_frequency``), the share of calls that failed (``tools/failure_frequency``, 0
    without calls, as TRL), and seconds spent in tools."""
    if not tools:
        return {}
    calls = [t for c in completions for t in c.turns if t.role == "tool"]
    return {"tools/call_frequency": len(calls) / max(len(completions), 1),
            "tools/failure_frequency": sum(t.error is not None for t in calls) / len(calls) if calls else 0.0,
            "tools/seconds": sum(t.seconds or 0.0 for t in calls)}


def extra_metrics(config: Config, selection: Selection, scorer: Scorer, group_size: int) -> dict[str, float]:
    """The step's figures beyond the loss's: what the reward functions logged, the tools', the
    prompts cut by ``max_prompt_length`` (only when set), dynamic sampling's and the judges' time
    (``judge/seconds``, part of ``scoring_ms``)."""
    out = {**selection.logged.metric_means(), **tool_metrics(scorer.tools, selection.completions)}
    if config.generation.max_prompt_length is not None:
        out["prompts_truncated"] = float(sum(e.cut > 0 for e in selection.examples))
    if config.grpo.dynamic_sampling:
        out.update(dynamic_sampling.metrics(selection, group_size))
    if (seconds := scorer.judge_seconds()) is not None:
        out["judge/seconds"] = seconds
    return out


def advantage_by_completion(selection: Selection, trained: list[float], group_size: int) -> list[float]:
    """Each generated completion's advantage: its trained slot's, 0 for a dropped group's (its
    rewards are all equal, or it was beyond the batch)."""
    out = [0.0] * len(selection.completions)
    G = group_size
    for k, g in enumerate(selection.slots):
        if k not in selection.padding:
            out[g * G : (g + 1) * G] = trained[k * G : (k + 1) * G]
    return out
