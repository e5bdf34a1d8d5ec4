"""GRPO math (docs/architecture.md, "Step data path"): advantages and the clipped policy loss. Pure functions on ``mx.array``.

The formulas follow TRL 1.16's ``GRPOTrainer`` (``_compute_loss`` and the advantage computation in
``_generate_and_score_completions``): sample (Bessel-corrected) standard deviation, ``1e-4`` in the
denominator, ``-min(ρA, clip(ρ)A)`` per token (``delta``: ρ capped from above too), CISPO's
clipped-weight policy gradient, SAPO's soft gate, VESPO's gamma weights, the k3 KL estimator (times ρ
with ``use_bias_correction_kl``), the off-policy sequence mask, and each loss type's normalisation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, get_args, get_type_hints

import mlx.core as mx
import numpy as np

from grpo_tui.protocol.config import Config, GrpoConfig

# The config's ``loss_type`` Literal is the list; ``policy_loss`` implements each (test_names.py).
LOSS_TYPES: tuple[str, ...] = get_args(get_type_hints(GrpoConfig)["loss_type"])


# The loss options that keep [grpo]'s name and value here (TRL 1.16's): copied as they are.
SAME_NAMED = ("delta", "use_bias_correction_kl", "off_policy_mask_threshold", "sapo_temperature_pos",
              "sapo_temperature_neg", "vespo_k_pos", "vespo_lambda_pos", "vespo_k_neg", "vespo_lambda_neg")


@dataclass(frozen=True)
class LossSettings:
    """The loss's settings, built once from the config (hashable: a compiled trace bakes them in)."""

    loss_type: str
    epsilon: float
    epsilon_high: float
    beta: float = 0.0
    importance_sampling_level: str = "token"
    max_completion_length: int | None = None
    delta: float | None = None
    use_bias_correction_kl: bool = False
    off_policy_mask_threshold: float | None = None
    sapo_temperature_pos: float = 1.0
    sapo_temperature_neg: float = 1.05
    vespo_k_pos: float = 2.0
    vespo_lambda_pos: float = 3.0
    vespo_k_neg: float = 3.0
    vespo_lambda_neg: float = 2.0
    # TRL's entropy bonus is on (entropy_coef != 0 or use_adaptive_entropy): the loss then takes the
    # entropy with its gradient; the coefficient itself changes between steps, so it is an input.
    entropy_bonus: bool = False
    # [async]'s off-policy correction (TRL's vllm_importance_sampling_*): None when off or synchronous
    importance_sampling_mode: str | None = None
    importance_sampling_clip_min: float | None = None
    importance_sampling_clip_max: float | None = None

    @classmethod
    def from_config(cls, config: Config) -> "LossSettings":
        g = config.grpo
        return cls(
            loss_type=g.loss_type,
            epsilon=g.epsilon,
            epsilon_high=float(g.epsilon_high if g.epsilon_high is not None else g.epsilon),
            beta=g.beta,
            importance_sampling_level=g.importance_sampling_level,
            max_completion_length=config.generation.max_completion_length,
            entropy_bonus=g.entropy_coef != 0.0 or g.use_adaptive_entropy,
            **_importance_sampling(config),
            **{name: getattr(g, name) for name in SAME_NAMED},
        )


def _importance_sampling(config: Config) -> dict[str, Any]:
    a = config.async_
    if not (a.on and a.importance_sampling_correction):
        return {}
    return {"importance_sampling_mode": a.importance_sampling_mode, "importance_sampling_clip_min": a.importance_sampling_clip_min,
            "importance_sampling_clip_max": a.importance_sampling_clip_max}


@dataclass
class EntropyCoefficient:
    """TRL 1.16's entropy coefficient across optimizer steps (``entropy_coef``; with
    ``use_adaptive_entropy`` its controller). A step applies the coefficient of the end of the
    previous step, and with the adaptive controller only while the previous step's entropy was at or
    below ``entropy_target`` (none before the first step); after each optimizer step ``update``
    moves it by ``delta`` within [``minimum``, ``maximum``]: up when that step's mean token entropy
    is at or below the target, down otherwise."""

    coef: float
    adaptive: bool = False
    minimum: float = 0.0
    maximum: float = 1.0
    delta: float = 0.005
    target: float = 0.2
    last_entropy: float = float("inf")

    @classmethod
    def from_config(cls, config: Config) -> "EntropyCoefficient":
        g = config.grpo
        return cls(g.entropy_coef, g.use_adaptive_entropy, g.entropy_coef_min, g.entropy_coef_max,
                   g.entropy_coef_delta, g.entropy_target)

    def applied(self) -> float:
        if self.adaptive and self.last_entropy > self.target:
            return 0.0
        return self.coef

    def update(self, entropy: float) -> None:
        """After an optimizer step whose tokens' mean entropy (all ranks) was ``entropy``."""
        if not self.adaptive:
            return
        if entropy <= self.target:
            self.coef = min(self.coef + self.delta, self.maximum)
        else:
            self.coef = max(self.coef - self.delta, self.minimum)
        self.last_entropy = entropy


@dataclass(frozen=True)
class PartOf:
    """These rows are a part of a micro-batch (``accel.two_cores``) of ``rows`` completions and
    ``tokens`` completion tokens: the parts' losses must add up to the whole's."""

    rows: int
    tokens: mx.array
    bonus_tokens: mx.array | None = None  # the whole's tokens the entropy bonus acts on (None: ``tokens``)


def zero_spread(grouped: np.ndarray) -> np.ndarray:
    """Per group (axis 1, kept): fewer than two different scored values (NaN, unscored, left out),
    so the group teaches nothing (its advantages are 0; dynamic sampling drops it)."""
    scored = ~np.isnan(grouped)
    return ~(np.where(scored, grouped, -np.inf).max(axis=1, keepdims=True)
             > np.where(scored, grouped, np.inf).min(axis=1, keepdims=True))


def _unscored(rewards: mx.array | np.ndarray | list) -> np.ndarray:
    """The rewards as float64, NaN where a completion is unscored (``None``: every reward function
    returned None for it)."""
    if isinstance(rewards, list):
        return np.array([np.nan if r is None else r for r in rewards], dtype=np.float64)
    return np.asarray(rewards.astype(mx.float32) if isinstance(rewards, mx.array) else rewards, dtype=np.float64)


def group_std(rewards: mx.array | np.ndarray | list, group_size: int) -> mx.array:
    """Per-completion sample std of its group's scored rewards, shape (N,); 0 for a group with
    fewer than two scored completions (nothing to spread)."""
    grouped = _unscored(rewards).reshape(-1, group_size)
    std = np.nan_to_num(_nanstd(grouped, axis=1), nan=0.0)
    return mx.array(np.repeat(std, group_size).astype(np.float32))


def group_advantages(rewards: mx.array | np.ndarray | list, group_size: int, scale: str = "group") -> mx.array:
    """``A_ij = (r_ij − mean_j r_i) / (s + 1e-4)`` for rewards laid out group by group, shape (N,).

    ``scale``: ``"group"`` (s = the group's sample std), ``"batch"`` (s = the whole batch's sample
    std) or ``"none"`` (no division). As in TRL 1.16, an unscored completion (NaN, or ``None`` in a
    list: every reward function returned None) is left out of its group's mean and std and of the
    batch's std, and its advantage is 0; so is every advantage whose std cannot be measured (one
    scored completion in the group).
    """
    if scale not in ("group", "batch", "none"):
        raise ValueError(f"scale_rewards must be group, batch or none, not {scale!r}")
    values = _unscored(rewards)
    grouped = values.reshape(-1, group_size)
    # A group of equal rewards has exactly zero advantage; float rounding of the mean (e.g. of
    # eight 0.2s) would otherwise leave ~1e-8 that the 1e-4 denominator blows up to ~1e-4.
    centered = np.where(zero_spread(grouped), 0.0, grouped - _nanmean(grouped, axis=1, keepdims=True))
    if scale == "none":
        advantages = centered.reshape(-1)
    elif scale == "group":
        std = _nanstd(grouped, axis=1, keepdims=True) if group_size > 1 else np.zeros((len(grouped), 1))
        advantages = (centered / (std + 1e-4)).reshape(-1)
    else:
        std = _nanstd(values) if values.size > 1 else np.zeros(())
        advantages = centered.reshape(-1) / (std + 1e-4)
    return mx.array(np.nan_to_num(advantages, nan=0.0).astype(np.float32))


def _nanmean(x: np.ndarray, axis: int | None = None, keepdims: bool = False) -> np.ndarray:
    count = np.sum(~np.isnan(x), axis=axis, keepdims=keepdims)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.nansum(x, axis=axis, keepdims=keepdims) / count  # NaN where nothing counts (torch.nanmean)


def _nanstd(x: np.ndarray, axis: int | None = None, keepdims: bool = False) -> np.ndarray:
    """TRL's ``nanstd``: Bessel-corrected over the non-NaN values; NaN with fewer than two."""
    count = np.sum(~np.isnan(x), axis=axis, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        variance = _nanmean((x - _nanmean(x, axis, keepdims=True)) ** 2, axis, keepdims=True)
        std = np.sqrt(variance * np.where(count > 1, count / (count - 1), np.nan))
    return std if keepdims else np.squeeze(std, axis=axis)


def normalize_then_sum(per_fn: np.ndarray, weights: np.ndarray, group_size: int) -> mx.array:
    """TRL 1.16's ``multi_objective_aggregation = "normalize_then_sum"``, shape (N,): each reward
    function's scores (``per_fn``, (N, K) group by group, NaN where it returned None) normalised
    within each group, ``(r − mean) / (std + 1e-4)`` (nan-aware), weighted and summed ignoring NaN;
    the sums then normalised over the batch the same way. A completion every function returned None
    for (or whose batch has no spread to measure) gets 0.

    As in ``group_advantages``, a function whose scores in a group are all equal contributes
    exactly 0 there (float rounding of the mean would otherwise leave ~1e-8 / 1e-4)."""
    per_fn = np.asarray(per_fn, dtype=np.float64)
    n, k = per_fn.shape
    grouped = per_fn.reshape(-1, group_size, k)
    mean_k = _nanmean(grouped, axis=1, keepdims=True)
    std_k = _nanstd(grouped, axis=1, keepdims=True) if group_size > 1 else np.zeros_like(mean_k)
    centered = np.where(zero_spread(grouped), 0.0, grouped - mean_k)
    reward_k = (centered / (std_k + 1e-4)).reshape(n, k)
    rewards = np.nansum(reward_k * np.asarray(weights, dtype=np.float64)[None, :], axis=1)
    rewards[np.isnan(per_fn).all(axis=1)] = np.nan
    std = _nanstd(rewards) if n > 1 else np.zeros(())
    advantages = (rewards - _nanmean(rewards)) / (std + 1e-4)
    return mx.array(np.nan_to_num(advantages, nan=0.0).astype(np.float32))


def advantages(config: Config, totals: list[float | None], scores: dict[str, list[float | None]],
                weights: dict[str, float]) -> mx.array:
    """The trained batch's advantages under ``grpo.multi_objective_aggregation`` (TRL 1.16's):
    from the weighted ``totals`` (``sum_then_normalize``) or from each function's ``scores`` in
    the same order (``normalize_then_sum``; an environment's reward columns weigh 1)."""
    g = config.grpo
    if g.multi_objective_aggregation == "normalize_then_sum":
        matrix = np.array([[np.nan if v is None else v for v in column] for column in scores.values()], dtype=np.float64)
        return normalize_then_sum(matrix.reshape(len(scores), len(totals)).T,
                                  np.array([weights.get(label, 1.0) for label in scores]), g.group_size)
    return group_advantages(totals, g.group_size, g.scale_rewards)  # None: unscored, left out as in TRL 1.16


def high_entropy_mask(entropy: mx.array, mask: mx.array, quantile: float) -> mx.array:
    """TRL's ``get_high_entropy_mask`` with ``threshold = 1 - top_entropy_quantile``: 1.0 where a
    counted token's entropy is at least the ``1 - quantile`` quantile (linear interpolation, as
    ``torch.quantile``) of the counted tokens' entropies, else 0.0; all zeros when nothing counts.
    ``entropy``, ``mask``: (N, T). The quantile is over this micro-batch, which lives on one rank,
    so the mask does not depend on the rank count (TRL gathers its processes' micro-batches)."""
    values = np.asarray(entropy.astype(mx.float32), dtype=np.float32)
    counted = np.asarray(mask.astype(mx.float32)) > 0
    if not counted.any():
        return mx.zeros(mask.shape, dtype=mx.float32)
    floor = np.quantile(values[counted], 1.0 - quantile)
    return mx.array(((values * counted >= floor) & counted).astype(np.float32))


@dataclass(frozen=True)
class _Counts:
    """What a loss type divides by: this micro-batch's completion tokens (``seq_tokens`` per row,
    ``tokens`` in all), its rows, and the accumulated batch's (``part_of``, ``num_items``)."""

    seq_tokens: mx.array
    tokens: mx.array
    rows: int
    batch_tokens: mx.array | None
    num_items: float | mx.array | None
    accumulation_steps: int
    max_completion_length: int | None


# One normalisation of the masked per-token loss (N, T) per loss type, TRL's, side by side.
def _grpo(masked: mx.array, n: _Counts) -> mx.array:  # each completion's mean, then the rows' mean
    return mx.sum(mx.sum(masked, axis=-1) / mx.maximum(n.seq_tokens, 1.0)) / n.rows / n.accumulation_steps


def _bnpo(masked: mx.array, n: _Counts) -> mx.array:  # the micro-batch's token mean
    denom = n.tokens if n.batch_tokens is None else mx.array(n.batch_tokens, dtype=mx.float32)
    return mx.sum(masked) / mx.maximum(denom, 1.0) / n.accumulation_steps


def _dr_grpo(masked: mx.array, n: _Counts) -> mx.array:  # a constant: rows × the longest completion allowed
    length = n.max_completion_length if n.max_completion_length is not None else masked.shape[-1]
    return mx.sum(masked) / (n.rows * length) / n.accumulation_steps


def _dapo(masked: mx.array, n: _Counts) -> mx.array:  # the active tokens of the whole accumulated batch
    denom = n.tokens if n.num_items is None else mx.array(n.num_items, dtype=mx.float32)
    return mx.sum(masked) / mx.maximum(denom, 1.0)


def _luspo(masked: mx.array, n: _Counts) -> mx.array:  # each completion's sum (its length weighs it), the rows' mean
    return mx.sum(masked) / n.rows / n.accumulation_steps


NORMALISATIONS = {"grpo": _grpo, "bnpo": _bnpo, "dr_grpo": _dr_grpo, "dapo": _dapo,
                  "cispo": _dapo, "sapo": _grpo, "luspo": _luspo, "vespo": _dapo}
DAPO_NORMALISED = ("dapo", "cispo", "vespo")  # normalised by the accumulated batch's tokens, not per micro-batch
CLIPPED = ("grpo", "bnpo", "dr_grpo", "dapo", "luspo")  # the types with PPO's clipped surrogate


def _log_weight(log_ratio: mx.array, mask: mx.array, seq_tokens: mx.array, level: str) -> mx.array:
    """The log importance weight: per token, or the completion's mean log ratio (GSPO's sequence level)."""
    if level == "token":
        return log_ratio
    if level == "sequence":
        return (mx.sum(log_ratio * mask, axis=-1) / mx.maximum(seq_tokens, 1.0))[:, None]
    raise ValueError(f"importance_sampling_level must be token or sequence, not {level!r}")


def _clip_metrics(ratio: mx.array, adv: mx.array, mask: mx.array, tokens: mx.array,
                  settings: LossSettings) -> dict[str, mx.array]:
    """Clip statistics (TRL): a token counts as clipped only when clipping changes its gradient."""
    ratio_b = mx.broadcast_to(ratio, mask.shape)
    low = ((ratio_b < 1.0 - settings.epsilon) & (adv < 0)).astype(mx.float32)
    high = ((ratio_b > 1.0 + settings.epsilon_high) & (adv > 0)).astype(mx.float32)
    denom = mx.maximum(tokens, 1.0)
    # TRL 1.16's clip_ratio/low_min and high_max: each completion's share of clipped tokens, then the
    # micro-batch's least (most); a completion without loss tokens is NaN there, left out here
    seq_tokens = mx.sum(mask, axis=-1)
    has = seq_tokens > 0
    per_row = mx.maximum(seq_tokens, 1.0)
    return {
        "clip_ratio_low": mx.sum(low * mask) / denom,
        "clip_ratio_high": mx.sum(high * mask) / denom,
        "clip_ratio_region": mx.sum(mx.maximum(low, high) * mask) / denom,
        "clip_ratio/low_min": mx.min(mx.where(has, mx.sum(low * mask, axis=-1) / per_row, mx.inf)),
        "clip_ratio/high_max": mx.max(mx.where(has, mx.sum(high * mask, axis=-1) / per_row, -mx.inf)),
    }


# The metrics that are a micro-batch's extreme, not a token mean: min or max over its parts, then
# the mean over the micro-batches that had one (TRL appends one per micro-batch and averages them).
EXTREMES = {"clip_ratio/low_min": min, "clip_ratio/high_max": max,
            "sampling/importance_sampling_ratio/min": min, "sampling/importance_sampling_ratio/max": max}


def policy_loss(
    logps: mx.array,
    old_logps: mx.array,
    advantages: mx.array,
    mask: mx.array,
    settings: LossSettings,
    *,
    ref_logps: mx.array | None = None,
    num_items: float | mx.array | None = None,
    accumulation_steps: int = 1,
    part_of: PartOf | None = None,
    entropy_mask: mx.array | None = None,
    entropy: mx.array | None = None,
    entropy_coef: float | mx.array = 0.0,
    sampling_logps: mx.array | None = None,
    sampling_known: mx.array | None = None,
) -> tuple[mx.array, dict[str, mx.array]]:
    """The clipped surrogate loss of one micro-batch (docs/architecture.md, "Step data path").

    ``logps``, ``old_logps``, ``ref_logps``, ``mask``: (N, T) per completion token; ``advantages``:
    (N,). ``num_items`` is the number of completion tokens in the whole accumulated batch (``dapo``;
    defaults to this micro-batch's). ``part_of``: these rows are a part of a larger micro-batch.
    ``entropy_mask`` (``top_entropy_quantile``, ``high_entropy_mask``): (N, T), multiplies the policy
    term alone, as in TRL: the KL term and every normalisation still count each masked-in token.
    ``entropy`` (N, T), differentiable, with ``settings.entropy_bonus``: TRL's entropy bonus, the
    loss minus ``entropy_coef`` × the mean entropy of the tokens the policy term acts on (this
    micro-batch's, or ``part_of``'s whole), divided by ``accumulation_steps`` alone whatever the loss
    type (``entropy_bonus``). ``sampling_logps``, ``sampling_known``: [async]'s correction (``importance_sampling_weight``).
    Returns the scalar loss and metrics (means over masked tokens): ``clip_ratio_low``,
    ``clip_ratio_high``, ``clip_ratio_region``, ``kl``, ``tokens``, and ``EXTREMES``' (the rows' least
    or most, not a mean); with the bonus ``policy_loss`` (the loss without it: a sum, not a mean) and
    ``bonus_entropy``, ``bonus_tokens`` (the bonus's entropy sum and token count over ``tokens``).
    """
    if settings.loss_type not in NORMALISATIONS:
        raise ValueError(f"loss_type must be one of {', '.join(LOSS_TYPES)}, not {settings.loss_type!r}")
    mask = mask.astype(mx.float32)
    seq_tokens = mx.sum(mask, axis=-1)
    tokens = mx.sum(mask)
    log_ratio = logps - old_logps
    ratio = mx.exp(_log_weight(log_ratio, mask, seq_tokens, settings.importance_sampling_level))
    adv = advantages[:, None]
    is_weight, is_metrics = (importance_sampling_weight(old_logps, sampling_logps, sampling_known, mask, tokens, settings)
                             if settings.importance_sampling_mode is not None and sampling_logps is not None else (None, {}))
    per_token, metrics = _policy_term(logps, log_ratio, ratio, adv, mask, tokens, settings, is_weight)
    if settings.off_policy_mask_threshold is not None:
        per_token = per_token * off_policy_mask(logps, old_logps, adv, mask, settings.off_policy_mask_threshold)
    if entropy_mask is not None:
        per_token = per_token * entropy_mask
    if is_weight is not None and settings.loss_type != "vespo":  # VESPO folds it into its gamma weights, as TRL
        per_token = per_token * is_weight
    metrics = {**metrics, **is_metrics}

    kl = mx.array(0.0)
    if settings.beta != 0.0:
        if ref_logps is None:
            raise ValueError("beta > 0 needs ref_logps")
        delta = ref_logps - logps
        per_token_kl = mx.exp(delta) - delta - 1.0  # k3 estimator, >= 0
        if settings.use_bias_correction_kl:  # the ratio's gradient makes it the unbiased reverse-KL gradient
            per_token_kl = per_token_kl * ratio
        per_token = per_token + settings.beta * per_token_kl
        kl = mx.sum(per_token_kl * mask) / mx.maximum(tokens, 1.0)

    counts = _Counts(seq_tokens, tokens, mask.shape[0] if part_of is None else part_of.rows,
                     None if part_of is None else part_of.tokens, num_items, accumulation_steps,
                     settings.max_completion_length)
    loss = NORMALISATIONS[settings.loss_type](per_token * mask, counts)
    metrics = {**metrics, "kl": kl, "tokens": tokens}
    if settings.entropy_bonus:
        if entropy is None:
            raise ValueError("the entropy bonus needs the entropy")
        acted = mask if entropy_mask is None else mask * entropy_mask
        # the mask's token count reused, not summed again: a second identical sum in a compiled
        # trace fails in MLX 0.32 (an internal "_Map_base::at")
        counted = tokens if entropy_mask is None else mx.sum(acted)
        bonus, bonus_metrics = entropy_bonus(entropy, acted, counted, tokens, part_of, accumulation_steps)
        metrics = {**metrics, **bonus_metrics, "policy_loss": mx.stop_gradient(loss)}
        loss = loss - entropy_coef * bonus
    return loss, metrics


def entropy_bonus(entropy: mx.array, acted: mx.array, counted: mx.array, tokens: mx.array, part_of: PartOf | None,
                  accumulation_steps: int) -> tuple[mx.array, dict[str, mx.array]]:
    """TRL 1.16's entropy bonus term H (the loss is L_policy - coef · H): the mean entropy of the
    tokens ``acted`` on (the loss mask, times the high-entropy mask if any; ``counted`` of them), over the micro-batch,
    divided for gradient accumulation only; and its entropy sum and token count over ``tokens``
    (token-weighted like the other metrics, so their ratio is the accumulated batch's mean entropy,
    which the adaptive coefficient follows)."""
    whole = counted if part_of is None else (part_of.tokens if part_of.bonus_tokens is None else part_of.bonus_tokens)
    total = mx.sum(entropy * acted)
    bonus = total / mx.maximum(whole, 1.0) / accumulation_steps
    denom = mx.maximum(tokens, 1.0)
    return bonus, {"bonus_entropy": mx.stop_gradient(total) / denom, "bonus_tokens": counted / denom}


def importance_sampling_weight(old_logps: mx.array, sampling_logps: mx.array, known: mx.array | None, mask: mx.array,
                               tokens: mx.array, settings: LossSettings) -> tuple[mx.array, dict[str, mx.array]]:
    """[async]'s off-policy correction, TRL 1.16's ``vllm_importance_sampling_*`` for a sampler some
    steps behind the learner: the ratio of the learner's probability of a sampled token (``*_token``)
    or completion (``sequence_*``) to the sampler's, truncated to [clip_min, clip_max] (truncated IS,
    Ionides 2008; Yao et al. 2025, "Your efficient RL framework secretly brings you off-policy RL
    training") or zeroed outside it (masked IS, as in IcePop), a constant of the gradient. A token
    whose sampler log-probability is unknown (``known`` 0: an agent's tool-call tokens) weighs 1.
    The weight (N, T) or (N, 1), and the metrics: TRL's ``sampling/importance_sampling_ratio/*``
    (of the raw ratio) and ``async/is_clipped``, the share of loss tokens the bounds changed."""
    diff = (old_logps - sampling_logps) * mask
    if known is not None:
        diff = diff * known
    sequence = settings.importance_sampling_mode.startswith("sequence")  # type: ignore[union-attr]
    if sequence:
        diff = mx.sum(diff, axis=-1, keepdims=True)
    raw = mx.exp(mx.clip(diff, -30.0, 30.0))  # e^±30: far past any bound, never inf in the metrics
    low = settings.importance_sampling_clip_min if settings.importance_sampling_clip_min is not None else 0.0
    high = settings.importance_sampling_clip_max if settings.importance_sampling_clip_max is not None else float("inf")
    outside = (raw < low) | (raw > high)
    if settings.importance_sampling_mode.endswith("truncate"):  # type: ignore[union-attr]
        weight = mx.clip(raw, low, high)
    else:
        weight = mx.where(outside, 0.0, raw)
    full = mx.broadcast_to(raw, mask.shape)
    denom = mx.maximum(tokens, 1.0)
    inf = mx.array(float("inf"))
    metrics = {
        "sampling/importance_sampling_ratio/mean": mx.sum(full * mask) / denom,
        "sampling/importance_sampling_ratio/min": mx.min(mx.where(mask > 0, full, inf)),
        "sampling/importance_sampling_ratio/max": mx.max(mx.where(mask > 0, full, -inf)),
        "async/is_clipped": mx.sum(mx.broadcast_to(outside, mask.shape).astype(mx.float32) * mask) / denom,
    }
    return mx.stop_gradient(weight), metrics


def _policy_term(logps: mx.array, log_ratio: mx.array, ratio: mx.array, adv: mx.array, mask: mx.array,
                 tokens: mx.array, settings: LossSettings, is_weight: mx.array | None = None
                 ) -> tuple[mx.array, dict[str, mx.array]]:
    """Each loss type's per-token policy loss (TRL 1.16's ``_compute_loss``), and the metrics TRL logs of it."""
    kind, denom = settings.loss_type, mx.maximum(tokens, 1.0)
    if kind == "cispo":  # the clipped ratio as a weight on the log-probability's gradient
        weight = mx.stop_gradient(mx.minimum(ratio, settings.epsilon_high))
        clipped = ((mx.broadcast_to(ratio, mask.shape) > settings.epsilon_high) & (adv > 0)).astype(mx.float32)
        return -weight * adv * logps, {"cispo_clip_ratio": mx.sum(clipped * mask) / denom}
    if kind == "sapo":  # a soft, temperature-scaled gate instead of the hard clip
        temperature = mx.where(adv > 0, settings.sapo_temperature_pos, settings.sapo_temperature_neg)
        return -(mx.sigmoid(temperature * (ratio - 1.0)) * 4.0 / temperature) * adv, {}
    if kind == "vespo":
        phi = vespo_weights(log_ratio, adv, mask, settings, is_weight)
        return -phi * adv * logps, {"vespo/phi_seq_mean": mx.sum(mx.broadcast_to(phi, mask.shape) * mask) / denom}
    clipped_ratio = mx.clip(ratio, 1.0 - settings.epsilon, 1.0 + settings.epsilon_high)
    capped = ratio if settings.delta is None else mx.minimum(ratio, settings.delta)  # two-sided clipping
    return -mx.minimum(capped * adv, clipped_ratio * adv), _clip_metrics(ratio, adv, mask, tokens, settings)


def vespo_weights(log_ratio: mx.array, adv: mx.array, mask: mx.array, settings: LossSettings,
                  is_weight: mx.array | None = None) -> mx.array:
    """VESPO's gamma weight of each completion (N, 1), a constant of the gradient (TRL's
    ``get_gamma_weights``): φ(w) = e^λ w^k e^(-λw) of its sequence ratio w, which takes the
    off-policy correction's weight in too when [async] has one (``is_weight``)."""
    lower = float(np.log(1e-8))
    log_ratio = log_ratio if is_weight is None else log_ratio + mx.clip(mx.log(is_weight), lower, 20.0)
    seq_log_ratio = mx.sum(mx.clip(log_ratio, -20.0, 20.0) * mask, axis=-1, keepdims=True)
    log_w = mx.clip(seq_log_ratio, lower, 20.0)
    positive = adv >= 0
    k = mx.where(positive, settings.vespo_k_pos, settings.vespo_k_neg)
    lam = mx.maximum(mx.where(positive, settings.vespo_lambda_pos, settings.vespo_lambda_neg), 1e-4)
    phi = mx.exp(lam + k * log_w - lam * mx.exp(log_w))
    return mx.stop_gradient(mx.where(mx.isfinite(phi), phi, 0.0))


def off_policy_mask(logps: mx.array, old_logps: mx.array, adv: mx.array, mask: mx.array, threshold: float) -> mx.array:
    """DeepSeek-V3.2's off-policy sequence mask (TRL's ``get_off_policy_mask``), (N, 1): a completion
    with a negative advantage whose mean KL from the sampling policy is above ``threshold`` is dropped."""
    kl = old_logps - mx.stop_gradient(logps)
    kl = mx.where(mx.isnan(kl), 0.0, kl)
    mean_kl = mx.sum(kl * mask, axis=-1, keepdims=True) / mx.maximum(mx.sum(mask, axis=-1, keepdims=True), 1.0)
    return ((adv >= 0) | (mean_kl <= threshold)).astype(mask.dtype)
