"""[async]'s off-policy correction (TRL 1.16's vllm_importance_sampling_* modes) in the loss: what
each mode does to the gradient's weights, that a weight of 1 changes nothing, and that an unknown
sampler log-probability weighs 1."""

from __future__ import annotations

import math

import mlx.core as mx
import pytest

from grpo_tui.worker.engine.learning.grpo import LossSettings, importance_sampling_weight, policy_loss

LEARNER = mx.array([[-1.0, -2.0, -0.5], [-0.2, -0.3, -0.4]])
SAMPLER = mx.array([[-1.0, -3.0, -0.5], [-0.2, -0.3, -0.1]])  # token ratios: [1, e, 1], [1, 1, e^-0.3]
MASK = mx.ones((2, 3))


def weight(mode: str, low: float | None = None, high: float | None = 2.0, known: mx.array | None = None) -> list:
    settings = LossSettings(loss_type="grpo", epsilon=0.2, epsilon_high=0.2, importance_sampling_mode=mode,
                            importance_sampling_clip_min=low, importance_sampling_clip_max=high)
    w, metrics = importance_sampling_weight(LEARNER, SAMPLER, known, MASK, mx.sum(MASK), settings)
    return [[round(v, 4) for v in row] for row in mx.broadcast_to(w, MASK.shape).tolist()], metrics


def test_token_truncate_caps_each_token_and_token_mask_drops_it():
    capped, metrics = weight("token_truncate")
    assert capped == [[1.0, 2.0, 1.0], [1.0, 1.0, round(math.exp(-0.3), 4)]]
    assert metrics["async/is_clipped"].item() == pytest.approx(1 / 6)
    masked, _ = weight("token_mask")
    assert masked == [[1.0, 0.0, 1.0], [1.0, 1.0, round(math.exp(-0.3), 4)]]
    floored, _ = weight("token_truncate", low=0.9)
    assert floored[1][2] == 0.9


def test_sequence_modes_weigh_a_whole_completion_by_its_ratio():
    capped, _ = weight("sequence_truncate")  # completion 0: e (capped to 2); completion 1: e^-0.3
    assert capped == [[2.0] * 3, [round(math.exp(-0.3), 4)] * 3]
    masked, metrics = weight("sequence_mask")
    assert masked == [[0.0] * 3, [round(math.exp(-0.3), 4)] * 3]
    assert metrics["async/is_clipped"].item() == pytest.approx(0.5)
    assert metrics["sampling/importance_sampling_ratio/max"].item() == pytest.approx(math.e, rel=1e-5)


def test_an_unknown_sampler_log_probability_weighs_one():
    known = mx.array([[1.0, 0.0, 1.0], [1.0, 1.0, 1.0]])  # completion 0's second token: a tool's result
    masked, _ = weight("token_mask", known=known)
    assert masked[0] == [1.0, 1.0, 1.0]


def test_the_loss_is_todays_when_the_sampler_is_the_learner():
    """On-policy (sampler = learner), every mode leaves the loss and its gradient as without it."""
    adv = mx.array([1.0, -0.5])
    plain = LossSettings(loss_type="grpo", epsilon=0.2, epsilon_high=0.2)

    def grad(settings: LossSettings) -> mx.array:
        return mx.grad(lambda lp: policy_loss(lp, mx.stop_gradient(lp), adv, MASK, settings,
                                              sampling_logps=LEARNER, sampling_known=MASK)[0])(LEARNER)

    for mode in ("token_truncate", "token_mask", "sequence_truncate", "sequence_mask"):
        corrected = LossSettings(loss_type="grpo", epsilon=0.2, epsilon_high=0.2, importance_sampling_mode=mode,
                                 importance_sampling_clip_max=3.0)
        assert mx.allclose(grad(corrected), grad(plain)).item()
    off = LossSettings(loss_type="grpo", epsilon=0.2, epsilon_high=0.2, importance_sampling_mode="token_truncate",
                       importance_sampling_clip_max=3.0)
    shifted = mx.grad(lambda lp: policy_loss(lp, mx.stop_gradient(lp), adv, MASK, off,
                                             sampling_logps=SAMPLER, sampling_known=MASK)[0])(LEARNER)
    assert not mx.allclose(shifted, grad(plain)).item()  # off-policy, the weights move the gradient
