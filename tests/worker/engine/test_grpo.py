"""GRPO math against hand-computed numbers (docs/architecture.md, "Step data path"; TRL's formulas)."""

import math

import mlx.core as mx
import numpy as np
import pytest

from grpo_tui.worker.engine.learning import grpo
from grpo_tui.worker.engine.learning.grpo import LossSettings, group_advantages


def policy_loss(logps, old_logps, advantages, mask, *, loss_type, epsilon, epsilon_high, beta=0.0,
                importance_sampling_level="token", max_completion_length=None, **arrays):
    """``grpo.policy_loss`` with its settings spelled out as keywords."""
    settings = LossSettings(loss_type, epsilon, epsilon_high, beta, importance_sampling_level, max_completion_length)
    return grpo.policy_loss(logps, old_logps, advantages, mask, settings, **arrays)

REWARDS = mx.array([1.0, 0.0, 0.0, 1.0, 2.0, 2.0, 2.0, 2.0])


def close(a, b, tol=1e-5):
    np.testing.assert_allclose(np.array(a), np.array(b), rtol=tol, atol=tol)


def test_group_advantages_use_the_groups_sample_std():
    s = math.sqrt(1 / 3)  # Bessel-corrected std of [1, 0, 0, 1]
    a = 0.5 / (s + 1e-4)
    close(group_advantages(REWARDS, 4, "group"), [a, -a, -a, a, 0, 0, 0, 0])


def test_batch_scaling_uses_the_whole_batch_std_but_group_means():
    s = math.sqrt(5.5 / 7)  # sample std of all 8 rewards (mean 1.25)
    a = 0.5 / (s + 1e-4)
    close(group_advantages(REWARDS, 4, "batch"), [a, -a, -a, a, 0, 0, 0, 0])


def test_no_scaling_only_centers():
    close(group_advantages(REWARDS, 4, "none"), [0.5, -0.5, -0.5, 0.5, 0, 0, 0, 0])


def test_a_group_of_equal_rewards_has_exactly_zero_advantage():
    rewards = mx.array([0.2] * 8 + [0.2, 1.2] * 4)
    adv = group_advantages(rewards, 8, "group")
    assert np.array(adv[:8]).tolist() == [0.0] * 8
    assert abs(float(mx.sum(adv[8:]))) < 1e-4


def test_unknown_scale_is_an_error():
    with pytest.raises(ValueError, match="scale_rewards"):
        group_advantages(REWARDS, 4, "max")


# Two completions, three token slots. Ratios: seq 0 = [1.5, 0.9, (5.0 masked)], seq 1 = [0.7, 1.1, 1.0].
OLD = mx.array([[-1.0, -2.0, -0.5], [-1.5, -0.3, -2.0]])
RATIOS = np.array([[1.5, 0.9, 5.0], [0.7, 1.1, 1.0]])
NEW = OLD + mx.array(np.log(RATIOS), dtype=mx.float32)
MASK = mx.array([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
ADV = mx.array([1.0, -1.0])
# Per-token loss -min(ρA, clip(ρ, 0.8, 1.28)A): seq 0 (A=+1) = [-1.28, -0.9]; seq 1 (A=-1) = [0.8, 1.1, 1.0].
SEQ0, SEQ1 = [-1.28, -0.9], [0.8, 1.1, 1.0]
TOTAL = sum(SEQ0) + sum(SEQ1)  # 0.72 over 5 tokens


def loss(loss_type, **kw):
    args = dict(loss_type=loss_type, epsilon=0.2, epsilon_high=0.28)
    args.update(kw)
    return policy_loss(NEW, OLD, ADV, MASK, **args)


@pytest.mark.parametrize(
    "loss_type, kwargs, expected",
    [
        ("grpo", {}, (sum(SEQ0) / 2 + sum(SEQ1) / 3) / 2),
        ("bnpo", {}, TOTAL / 5),
        ("dr_grpo", {"max_completion_length": 4}, TOTAL / (2 * 4)),
        ("dapo", {}, TOTAL / 5),
        ("dapo", {"num_items": 10}, TOTAL / 10),
    ],
)
def test_each_loss_type_normalises_as_designed(loss_type, kwargs, expected):
    value, _ = loss(loss_type, **kwargs)
    close(value, expected)


@pytest.mark.parametrize("loss_type", ["grpo", "bnpo", "dr_grpo"])
def test_accumulation_divides_all_but_dapo(loss_type):
    full, _ = loss(loss_type, max_completion_length=4)
    halved, _ = loss(loss_type, max_completion_length=4, accumulation_steps=2)
    close(halved, np.array(full) / 2)
    dapo, _ = loss("dapo", num_items=5)
    dapo2, _ = loss("dapo", num_items=5, accumulation_steps=2)
    close(dapo2, dapo)


def test_clip_ratios_count_tokens_whose_gradient_is_clipped():
    _, m = loss("bnpo")
    close(m["clip_ratio_low"], 1 / 5)  # 0.7 < 0.8 with A < 0
    close(m["clip_ratio_high"], 1 / 5)  # 1.5 > 1.28 with A > 0 (the masked 5.0 does not count)
    close(m["clip_ratio_region"], 2 / 5)
    close(m["tokens"], 5)


def test_epsilon_high_widens_only_the_upper_bound():
    value, m = loss("bnpo", epsilon_high=0.6)  # 1.5 no longer clipped above
    close(value, (-1.5 - 0.9 + sum(SEQ1)) / 5)
    close(m["clip_ratio_high"], 0.0)
    close(m["clip_ratio_low"], 1 / 5)


def test_sequence_level_importance_sampling_uses_the_masked_mean_log_ratio():
    r0 = math.sqrt(1.5 * 0.9)  # geometric mean of the two unmasked ratios
    r1 = (0.7 * 1.1 * 1.0) ** (1 / 3)
    value, m = loss("grpo", importance_sampling_level="sequence")
    close(value, (-r0 + r1) / 2)
    close(m["clip_ratio_region"], 0.0)


def test_beta_adds_the_k3_kl_term():
    shift = mx.array([[math.log(2.0), 0.0, 7.0], [0.0, 0.0, 0.0]])  # masked slot must not count
    k3 = 2.0 - math.log(2.0) - 1.0
    value, m = loss("bnpo", beta=0.1, ref_logps=NEW + shift)
    close(value, TOTAL / 5 + 0.1 * k3 / 5)
    close(m["kl"], k3 / 5)
    with pytest.raises(ValueError, match="ref_logps"):
        loss("bnpo", beta=0.1)


@pytest.mark.parametrize("loss_type", ["grpo", "dr_grpo", "dapo"])
def test_accumulated_micro_batches_sum_to_the_full_batch_loss(loss_type):
    rng = np.random.default_rng(0)
    logp = mx.array(rng.normal(size=(4, 5)), dtype=mx.float32)
    old = logp + mx.array(rng.normal(scale=0.3, size=(4, 5)), dtype=mx.float32)
    mask = mx.array((rng.random((4, 5)) > 0.3).astype(np.float32))
    adv = mx.array([1.0, -0.5, 0.3, -0.8])
    kw = dict(loss_type=loss_type, epsilon=0.2, epsilon_high=0.28, max_completion_length=5)
    full, _ = policy_loss(logp, old, adv, mask, **kw)
    items = mx.sum(mask)
    parts = [
        policy_loss(logp[s], old[s], adv[s], mask[s], num_items=items, accumulation_steps=2, **kw)[0]
        for s in (slice(0, 2), slice(2, 4))
    ]
    close(parts[0] + parts[1], full)


def _logps(theta, contexts, targets):
    logits = theta[None, None, :] + contexts  # (N, T, V)
    logp = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
    return mx.take_along_axis(logp, targets[..., None], axis=-1)[..., 0]


@pytest.mark.parametrize("loss_type", ["grpo", "bnpo", "dapo"])
def test_gradient_is_advantage_times_grad_logp_when_ratio_is_one(loss_type):
    """ρ = 1 (old = stop_gradient(logp)): ∇loss = −Σ A_i m_it ∇logp_it / normaliser, checked against
    the analytic expression and central finite differences."""
    rng = np.random.default_rng(1)
    V, N, T = 5, 2, 3
    theta = mx.array(rng.normal(size=V), dtype=mx.float32)
    contexts = mx.array(rng.normal(size=(N, T, V)), dtype=mx.float32)
    targets = mx.array(rng.integers(0, V, size=(N, T)))
    mask = mx.array([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
    adv = mx.array([0.7, -1.3])
    kw = dict(loss_type=loss_type, epsilon=0.2, epsilon_high=0.28)

    def f(th):
        lp = _logps(th, contexts, targets)
        return policy_loss(lp, mx.stop_gradient(lp), adv, mask, **kw)[0]

    grad = mx.grad(f)(theta)

    # Analytic: weights w_it = A_i m_it / normaliser, gradient = −Σ w_it ∇logp_it.
    n_i = mx.sum(mask, axis=1, keepdims=True)
    norm = {"grpo": N * n_i, "bnpo": mx.sum(mask), "dapo": mx.sum(mask)}[loss_type]
    weights = adv[:, None] * mask / norm
    analytic = mx.grad(lambda th: -mx.sum(weights * _logps(th, contexts, targets)))(theta)
    close(grad, analytic)

    old = _logps(theta, contexts, targets)  # frozen at θ for the finite difference

    def g(th):
        return policy_loss(_logps(th, contexts, targets), old, adv, mask, **kw)[0].item()

    h = 1e-2
    eye = np.eye(V, dtype=np.float32)
    fd = [(g(theta + h * mx.array(e)) - g(theta - h * mx.array(e))) / (2 * h) for e in eye]
    close(grad, fd, tol=2e-3)
    assert np.abs(np.array(grad)).max() > 1e-3  # the check is not vacuous


def test_clip_extremes_are_each_completions_clipped_share_at_its_least_and_most():
    # TRL 1.16's clip_ratio/low_min and high_max: per completion, the share of its tokens clipped
    # low (high); seq 0 (A=+1): high 1/2 (1.5), low 0; seq 1 (A=-1): low 1/3 (0.7), high 0
    _, m = loss("grpo")
    close(m["clip_ratio/low_min"], 0.0)
    close(m["clip_ratio/high_max"], 1 / 2)
    # a completion without loss tokens (masked out) is left out, as TRL's NaN is, not counted as 0
    _, m = policy_loss(NEW, OLD, ADV, mx.array([[0.0, 0.0, 0.0], [1.0, 1.0, 1.0]]),
                       loss_type="grpo", epsilon=0.2, epsilon_high=0.28)
    close(m["clip_ratio/low_min"], 1 / 3)
    close(m["clip_ratio/high_max"], 0.0)


def test_clip_extremes_are_the_micro_batch_extreme_then_the_mean_over_micro_batches():
    from grpo_tui.worker.engine.learning.update import _add_metrics, pass_stats

    def part(low_min, high_max, tokens):
        return mx.array(0.0), None, {"tokens": mx.array(tokens), "clip_ratio_low": mx.array(0.5),
                                     "clip_ratio/low_min": mx.array(low_min), "clip_ratio/high_max": mx.array(high_max)}

    sums: dict = {}
    _add_metrics(sums, [part(0.5, 0.25, 2.0), part(0.25, 0.75, 2.0)])  # one micro-batch in two parts
    _add_metrics(sums, [part(0.125, 0.5, 4.0)])
    _add_metrics(sums, [part(math.inf, -math.inf, 0.0)])  # every completion masked out: no value
    stats = pass_stats(sums)
    close(stats["clip_ratio/low_min"], (0.25 + 0.125) / 2)
    close(stats["clip_ratio/high_max"], (0.75 + 0.5) / 2)
    close(stats["clip_ratio_low"], 0.5)  # the token means as before
