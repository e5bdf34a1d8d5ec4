"""Every loss type and option of TRL 1.16's ``_compute_loss`` (cispo, sapo, luspo, vespo, ``delta``,
``use_bias_correction_kl``, ``off_policy_mask_threshold``, beside grpo, bnpo, dr_grpo, dapo): the loss
and its gradient with respect to the policy's log-probabilities equal a line-by-line transcription of
TRL's code (torch → mlx, one process, vLLM off) on random cases, at token and sequence level, whole
and with gradient accumulation. The transcription is written here, apart from the engine's code."""

from __future__ import annotations

import dataclasses
import math

import mlx.core as mx
import numpy as np
import pytest

from grpo_tui.protocol.config import ConfigError, parse_config
from grpo_tui.worker.engine.learning.grpo import LOSS_TYPES, EntropyCoefficient, LossSettings, policy_loss

MAX_LEN = 9


def trl_compute_loss(logps, old, ref, adv, mask, a, *, num_items, accumulation, entropies=None,  # type: ignore[no-untyped-def]
                     apply_coef=0.0, metrics=None):
    """TRL 1.16 ``GRPOTrainer._compute_loss`` from the log-probs on (``a``: its args), in its order;
    ``entropies`` with the entropy bonus on, ``apply_coef`` the coefficient it applies."""
    loss, policy_loss = _trl_policy_loss(logps, old, ref, adv, mask, a, num_items=num_items, accumulation=accumulation)
    if entropies is not None:  # self._entropy_bonus_enabled (no top_entropy_quantile: effective_mask = mask)
        effective_mask = mask
        entropy_loss = mx.sum(entropies * effective_mask) / mx.maximum(mx.sum(effective_mask), 1.0) / accumulation
        loss = loss - apply_coef * entropy_loss
        if metrics is not None:
            metrics["policy_loss"] = policy_loss
    return loss


def _trl_policy_loss(logps, old, ref, adv, mask, a, *, num_items, accumulation):  # type: ignore[no-untyped-def]
    """(loss, policy_loss) of ``_compute_loss`` before the entropy bonus."""
    advantages = adv[:, None]
    if a.off_policy_mask_threshold is not None:  # get_off_policy_mask
        kl_div = old - mx.stop_gradient(logps)
        kl_div = mx.where(mx.isnan(kl_div), 0.0, kl_div)
        avg_seq_kl = mx.sum(kl_div * mask, axis=1, keepdims=True) / mx.maximum(mx.sum(mask, axis=1, keepdims=True), 1.0)
        off_policy_mask = ((advantages >= 0) | (avg_seq_kl <= a.off_policy_mask_threshold)).astype(mask.dtype)
    log_ratio = logps - old
    if a.importance_sampling_level == "token":
        log_importance_weights = log_ratio
    else:
        log_importance_weights = (mx.sum(log_ratio * mask, -1) / mx.maximum(mx.sum(mask, -1), 1.0))[:, None]
    coef_1 = mx.exp(log_importance_weights)
    if a.beta != 0.0:
        per_token_kl = mx.exp(ref - logps) - (ref - logps) - 1
        if a.use_bias_correction_kl:
            per_token_kl = per_token_kl * coef_1
    if a.loss_type == "cispo":
        clamped_ratios = mx.stop_gradient(mx.minimum(coef_1, a.epsilon_high))
        per_token_loss = -clamped_ratios * advantages * logps
    elif a.loss_type in ["grpo", "bnpo", "dr_grpo", "dapo", "luspo"]:
        coef_2 = mx.clip(coef_1, 1 - a.epsilon, 1 + a.epsilon_high)
        if a.delta is not None:
            coef_1 = mx.minimum(coef_1, a.delta)
        per_token_loss = -mx.minimum(coef_1 * advantages, coef_2 * advantages)
    elif a.loss_type == "sapo":
        temperatures = mx.where(advantages > 0, a.sapo_temperature_pos, a.sapo_temperature_neg)
        per_token_loss = -(mx.sigmoid(temperatures * (coef_1 - 1)) * 4 / temperatures) * advantages
    else:  # vespo: get_gamma_weights (no importance_sampling_ratio without vLLM)
        seq_log_ratio = mx.sum(mx.clip(log_ratio, -20.0, 20.0) * mask, axis=-1, keepdims=True)
        log_w_seq = mx.clip(seq_log_ratio, math.log(1e-8), 20.0)
        w_seq = mx.exp(log_w_seq)
        is_nonneg_adv = advantages >= 0
        k_seq = mx.where(is_nonneg_adv, a.vespo_k_pos, a.vespo_k_neg)
        lambda_seq = mx.maximum(mx.where(is_nonneg_adv, a.vespo_lambda_pos, a.vespo_lambda_neg), 1e-4)
        phi = mx.exp(lambda_seq + k_seq * log_w_seq - lambda_seq * w_seq)
        phi_seq = mx.stop_gradient(mx.where(mx.isfinite(phi), phi, 0.0))
        per_token_loss = -phi_seq * advantages * logps
    if a.off_policy_mask_threshold is not None:
        per_token_loss = per_token_loss * off_policy_mask
    if a.beta != 0.0:
        per_token_loss = per_token_loss + a.beta * per_token_kl
    if a.loss_type in ["grpo", "sapo"]:
        loss = mx.mean(mx.sum(per_token_loss * mask, -1) / mx.maximum(mx.sum(mask, -1), 1.0))
    elif a.loss_type == "bnpo":
        loss = mx.sum(per_token_loss * mask) / mx.maximum(mx.sum(mask), 1.0)
    elif a.loss_type == "dr_grpo":
        loss = mx.sum(per_token_loss * mask) / (per_token_loss.shape[0] * MAX_LEN)
    elif a.loss_type in ["cispo", "dapo", "vespo"]:  # num_items spans the accumulated batch (steps_per_generation = GA)
        loss = mx.sum(per_token_loss * mask) / max(num_items, 1.0)
        return loss, mx.stop_gradient(loss)
    else:  # luspo
        loss = mx.mean(mx.sum(per_token_loss * mask, -1))
    return loss / accumulation, mx.stop_gradient(loss)


def case(seed: int, rows: int = 6):  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, MAX_LEN + 1, rows)
    mask = (np.arange(MAX_LEN)[None, :] < lengths[:, None]).astype(np.float32)
    logps = rng.normal(-2.0, 0.5, (rows, MAX_LEN)).astype(np.float32)
    old = (logps + rng.normal(0, 0.3, (rows, MAX_LEN))).astype(np.float32)  # off-policy: ratios away from 1
    ref = (logps + rng.normal(0, 0.3, (rows, MAX_LEN))).astype(np.float32)
    adv = rng.normal(size=rows).astype(np.float32)
    return [mx.array(x) for x in (logps, old, ref, adv, mask)]


OPTIONS = [
    {},
    {"beta": 0.04},
    {"beta": 0.04, "use_bias_correction_kl": True},
    {"delta": 1.5},
    {"off_policy_mask_threshold": 0.05},
    {"importance_sampling_level": "sequence", "beta": 0.04, "use_bias_correction_kl": True},
    {"sapo_temperature_pos": 0.7, "sapo_temperature_neg": 1.3, "vespo_k_pos": 1.5, "vespo_lambda_neg": 2.5},
]


@pytest.mark.parametrize("options", OPTIONS, ids=[",".join(o) or "defaults" for o in OPTIONS])
@pytest.mark.parametrize("loss_type", LOSS_TYPES)
def test_loss_and_gradient_equal_trls(loss_type, options):
    settings = LossSettings(loss_type=loss_type, epsilon=0.2, epsilon_high=5.0 if loss_type == "cispo" else 0.28,
                            max_completion_length=MAX_LEN, **options)
    for seed in range(3):
        logps, old, ref, adv, mask = case(seed)
        num_items = float(mx.sum(mask).item())

        def ours(lp):  # type: ignore[no-untyped-def]
            return policy_loss(lp, old, adv, mask, settings, ref_logps=ref, num_items=num_items)[0]

        def theirs(lp):  # type: ignore[no-untyped-def]
            return trl_compute_loss(lp, old, ref, adv, mask, settings, num_items=num_items, accumulation=1)

        np.testing.assert_allclose(np.array(ours(logps)), np.array(theirs(logps)), rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(np.array(mx.grad(ours)(logps)), np.array(mx.grad(theirs)(logps)), rtol=1e-4, atol=1e-7)


@pytest.mark.parametrize("loss_type", ["cispo", "sapo", "luspo", "vespo"])
def test_accumulated_micro_batches_add_up_as_trls(loss_type):
    """Two micro-batches of three rows, accumulated: each part's loss is TRL's for that part."""
    settings = LossSettings(loss_type=loss_type, epsilon=0.2, epsilon_high=0.28, max_completion_length=MAX_LEN, beta=0.04)
    logps, old, ref, adv, mask = case(7)
    num_items = float(mx.sum(mask).item())
    for part in (slice(0, 3), slice(3, 6)):
        args = (logps[part], old[part], adv[part], mask[part])
        ours = policy_loss(*args, settings, ref_logps=ref[part], num_items=num_items, accumulation_steps=2)[0]
        theirs = trl_compute_loss(logps[part], old[part], ref[part], adv[part], mask[part], settings,
                                  num_items=num_items, accumulation=2)
        np.testing.assert_allclose(np.array(ours), np.array(theirs), rtol=1e-5, atol=1e-7)


def test_the_metrics_trl_logs_for_cispo_and_vespo():
    logps, old, ref, adv, mask = case(3)
    cispo = LossSettings(loss_type="cispo", epsilon=0.2, epsilon_high=1.1)
    _, metrics = policy_loss(logps, old, adv, mask, cispo)
    ratio, adv_b = np.exp(np.array(logps - old)), np.array(adv)[:, None]
    expected = (((ratio > 1.1) & (adv_b > 0)) * np.array(mask)).sum() / np.array(mask).sum()
    assert float(metrics["cispo_clip_ratio"].item()) == pytest.approx(expected, rel=1e-6)
    _, metrics = policy_loss(logps, old, adv, mask, dataclasses.replace(cispo, loss_type="vespo"))
    assert 0 < float(metrics["vespo/phi_seq_mean"].item()) < 2


def test_the_toml_keys_are_checked_as_any_other():
    base = '[model]\npath = "m"\n[data]\npath = "d.jsonl"\n[[rewards]]\nname = "accuracy"\n[grpo]\n'
    config = parse_config(base + 'loss_type = "vespo"\nvespo_k_pos = 1.5\nuse_bias_correction_kl = true\n', check_paths=False)
    settings = LossSettings.from_config(config)
    assert (settings.loss_type, settings.vespo_k_pos, settings.use_bias_correction_kl) == ("vespo", 1.5, True)
    with pytest.raises(ConfigError, match="grpo.sapo_temperature_neg: 0.0 must be > 0"):
        parse_config(base + "sapo_temperature_neg = 0\n", check_paths=False)
    with pytest.raises(ConfigError, match="grpo.loss_type: 'gpg' is not one of grpo, bnpo, dr_grpo, dapo, cispo, sapo, luspo, vespo"):
        parse_config(base + 'loss_type = "gpg"\n', check_paths=False)


def trl_adaptive_entropy(window_entropies, a):  # type: ignore[no-untyped-def]
    """TRL 1.16's adaptive entropy controller over optimizer steps: (apply_coef during each step,
    the entropy_coef it logs after it), from each step's window entropy."""
    entropy_coef, last_world_entropy, out = a.entropy_coef, float("inf"), []
    for world_entropy in window_entropies:
        apply_coef = entropy_coef if last_world_entropy <= a.entropy_target else 0.0
        if world_entropy <= a.entropy_target:
            entropy_coef = min(entropy_coef + a.entropy_coef_delta, a.entropy_coef_max)
        else:
            entropy_coef = max(entropy_coef - a.entropy_coef_delta, a.entropy_coef_min)
        last_world_entropy = world_entropy
        out.append((apply_coef, entropy_coef))
    return out


def entropies_of(seed: int, rows: int = 6):  # type: ignore[no-untyped-def]
    return mx.array(np.random.default_rng(100 + seed).uniform(0.0, 3.0, (rows, MAX_LEN)).astype(np.float32))


@pytest.mark.parametrize("loss_type", LOSS_TYPES)
def test_the_entropy_bonus_loss_and_gradients_equal_trls(loss_type):
    """The loss with TRL's entropy bonus, and its gradient with respect to both the log-probs and
    the entropies, equal the transcription; whole and as two accumulated micro-batches; and
    ``policy_loss`` is the loss before the bonus as TRL logs it."""
    settings = LossSettings(loss_type=loss_type, epsilon=0.2, epsilon_high=0.28, max_completion_length=MAX_LEN,
                            beta=0.04, entropy_bonus=True)
    for seed, parts, coef in ((0, [slice(0, 6)], 0.3), (1, [slice(0, 3), slice(3, 6)], -0.05)):
        logps, old, ref, adv, mask = case(seed)
        entropies = entropies_of(seed)
        num_items = float(mx.sum(mask).item())
        for part in parts:
            args = (old[part], adv[part], mask[part])

            def ours(lp, ent):  # type: ignore[no-untyped-def]
                return policy_loss(lp, *args, settings, ref_logps=ref[part], num_items=num_items,
                                   accumulation_steps=len(parts), entropy=ent, entropy_coef=coef)[0]

            def theirs(lp, ent):  # type: ignore[no-untyped-def]
                return trl_compute_loss(lp, old[part], ref[part], adv[part], mask[part], settings, num_items=num_items,
                                        accumulation=len(parts), entropies=ent, apply_coef=coef)

            lp, ent = logps[part], entropies[part]
            np.testing.assert_allclose(np.array(ours(lp, ent)), np.array(theirs(lp, ent)), rtol=1e-5, atol=1e-7)
            for got, want in zip(mx.grad(ours, argnums=(0, 1))(lp, ent), mx.grad(theirs, argnums=(0, 1))(lp, ent)):
                np.testing.assert_allclose(np.array(got), np.array(want), rtol=1e-4, atol=1e-7)
            trl_metrics: dict = {}
            trl_compute_loss(lp, old[part], ref[part], adv[part], mask[part], settings, num_items=num_items,
                             accumulation=len(parts), entropies=ent, apply_coef=coef, metrics=trl_metrics)
            _, metrics = policy_loss(lp, *args, settings, ref_logps=ref[part], num_items=num_items,
                                     accumulation_steps=len(parts), entropy=ent, entropy_coef=coef)
            scale = 1 if loss_type in ("dapo", "cispo", "vespo") else len(parts)  # TRL's is before the division
            assert float(metrics["policy_loss"].item()) * scale == pytest.approx(float(trl_metrics["policy_loss"].item()),
                                                                               rel=1e-5, abs=1e-7)


def test_the_adaptive_entropy_coefficient_moves_as_trls():
    settings = parse_config('[model]\npath = "m"\n[data]\npath = "d.jsonl"\n[[rewards]]\nname = "accuracy"\n[grpo]\n'
                            'entropy_coef = 0.01\nuse_adaptive_entropy = true\nentropy_coef_delta = 0.02\n'
                            'entropy_coef_max = 0.05\nentropy_target = 0.5\n', check_paths=False).grpo
    window = [0.9, 0.4, 0.3, 0.2, 0.1, 0.6, 0.7, 0.8, 0.9, 0.45]
    controller = EntropyCoefficient(settings.entropy_coef, True, settings.entropy_coef_min, settings.entropy_coef_max,
                                    settings.entropy_coef_delta, settings.entropy_target)
    ours = []
    for entropy in window:
        applied = controller.applied()
        controller.update(entropy)
        ours.append((applied, controller.coef))
    theirs = trl_adaptive_entropy(window, settings)
    np.testing.assert_allclose(np.array(ours), np.array(theirs), rtol=1e-12)
    assert {a for a, _ in theirs} > {0.0}  # it both applied and held back the bonus
