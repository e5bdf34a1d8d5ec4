"""``grpo.top_entropy_quantile`` (TRL's, "Beyond the 80/20 rule"): the mask and the loss equal a
numpy re-derivation of TRL's ``get_high_entropy_mask`` and ``_compute_loss`` on the same inputs,
and the worker's training pass gives the same loss whether it sees the micro-batch whole or in parts."""

from __future__ import annotations

import dataclasses

import mlx.core as mx
import numpy as np
import pytest

from grpo_tui.protocol.config import ConfigError, parse_config
from grpo_tui.worker.engine.learning.grpo import LossSettings, high_entropy_mask, policy_loss


def trl_entropy_mask(entropies: np.ndarray, mask: np.ndarray, threshold: float) -> np.ndarray:
    """TRL's get_high_entropy_mask (one process), torch -> numpy line by line."""
    local = entropies[mask.astype(bool)].astype(np.float32)
    if local.size == 0:
        return np.zeros_like(entropies, dtype=bool)
    entropy_threshold = np.quantile(local, threshold)  # torch.quantile's default: linear
    masked_entropies = entropies * mask.astype(np.float32)
    entropy_mask = masked_entropies >= entropy_threshold
    return entropy_mask & mask.astype(bool)


def trl_loss(logps, old, adv, mask, ref, entropy_mask, *, loss_type, eps_low, eps_high, beta, max_len, num_items):
    """TRL's _compute_loss for the clipped losses (token level, one process, one accumulation step)."""
    coef_1 = np.exp(logps - old)
    coef_2 = np.clip(coef_1, 1 - eps_low, 1 + eps_high)
    a = adv[:, None]
    per_token_loss = -np.minimum(coef_1 * a, coef_2 * a)
    per_token_loss = per_token_loss * entropy_mask
    if beta != 0.0:
        per_token_kl = np.exp(ref - logps) - (ref - logps) - 1
        per_token_loss = per_token_loss + beta * per_token_kl
    if loss_type == "grpo":
        return ((per_token_loss * mask).sum(-1) / np.maximum(mask.sum(-1), 1.0)).mean()
    if loss_type == "bnpo":
        return (per_token_loss * mask).sum() / max(mask.sum(), 1.0)
    if loss_type == "dr_grpo":
        return (per_token_loss * mask).sum() / (per_token_loss.shape[0] * max_len)
    return (per_token_loss * mask).sum() / max(num_items, 1.0)  # dapo


def _inputs(seed: int, rows: int = 6, tokens: int = 9):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, tokens + 1, rows)
    mask = (np.arange(tokens)[None, :] < lengths[:, None]).astype(np.float32)
    mask[1] = 0.0  # a masked-out completion (mask_truncated_completions): none of its tokens count
    entropies = rng.uniform(0.0, 4.0, (rows, tokens)).astype(np.float32)
    logps = rng.normal(-2.0, 0.5, (rows, tokens)).astype(np.float32)
    old = (logps + rng.normal(0, 0.2, (rows, tokens))).astype(np.float32)
    ref = (logps + rng.normal(0, 0.3, (rows, tokens))).astype(np.float32)
    adv = rng.normal(size=rows).astype(np.float32)
    return entropies, mask, logps, old, ref, adv


@pytest.mark.parametrize("quantile", [0.0, 0.2, 0.5, 0.8, 1.0])
def test_the_mask_is_trls(quantile):
    for seed in range(5):
        entropies, mask, *_ = _inputs(seed)
        ours = np.array(high_entropy_mask(mx.array(entropies), mx.array(mask), quantile))
        theirs = trl_entropy_mask(entropies, mask, 1 - quantile)
        np.testing.assert_array_equal(ours.astype(bool), theirs)
        kept = theirs.sum()
        if quantile == 0.0:  # only the highest-entropy token (TRL's docstring)
            assert kept == 1
        elif quantile == 1.0:
            assert kept == mask.sum()
        else:
            assert 0 < kept < mask.sum()
            assert abs(kept - quantile * mask.sum()) <= 1.0  # about the top share of counted tokens


def test_no_counted_token_masks_everything():
    assert float(mx.sum(high_entropy_mask(mx.ones((2, 3)), mx.zeros((2, 3)), 0.2)).item()) == 0.0


@pytest.mark.parametrize("loss_type", ["grpo", "bnpo", "dr_grpo", "dapo"])
@pytest.mark.parametrize("beta", [0.0, 0.04])
def test_the_loss_is_trls(loss_type, beta):
    entropies, mask, logps, old, ref, adv = _inputs(11)
    quantile = 0.2
    settings = LossSettings(loss_type=loss_type, epsilon=0.2, epsilon_high=0.28, beta=beta, max_completion_length=9)
    emask = high_entropy_mask(mx.array(entropies), mx.array(mask), quantile)
    loss, _ = policy_loss(mx.array(logps), mx.array(old), mx.array(adv), mx.array(mask), settings,
                          ref_logps=mx.array(ref), num_items=float(mask.sum()), entropy_mask=emask)
    expected = trl_loss(logps, old, adv, mask, ref, trl_entropy_mask(entropies, mask, 1 - quantile).astype(np.float32),
                        loss_type=loss_type, eps_low=0.2, eps_high=0.28, beta=beta, max_len=9, num_items=mask.sum())
    assert loss.item() == pytest.approx(float(expected), rel=1e-5, abs=1e-7)
    unmasked, _ = policy_loss(mx.array(logps), mx.array(old), mx.array(adv), mx.array(mask), settings,
                              ref_logps=mx.array(ref), num_items=float(mask.sum()))
    assert abs(unmasked.item() - loss.item()) > 1e-4  # the mask changes the loss


def test_the_key_is_checked():
    base = '[model]\npath="m"\n[data]\npath="d.jsonl"\n[[rewards]]\nname="accuracy"\n[grpo]\n'
    assert parse_config(base, check_paths=False).grpo.top_entropy_quantile == 1.0
    assert parse_config(base + "top_entropy_quantile = 0.2\n", check_paths=False).grpo.top_entropy_quantile == 0.2
    with pytest.raises(ConfigError, match=r"grpo.top_entropy_quantile: 1.5 must be in \[0, 1\]"):
        parse_config(base + "top_entropy_quantile = 1.5\n", check_paths=False)


# ---------------------------------------------------------------- the training pass

TRAIN_CONFIG = """
[model]
path = "unused"
[data]
path = "unused.jsonl"
[[rewards]]
name = "accuracy"
[grpo]
group_size = 4
loss_type = "{loss_type}"
top_entropy_quantile = {quantile}
[generation]
max_completion_length = 8
temperature = 0.9
[training]
learning_rate = 0.01
max_grad_norm = 0.0
"""


def _model(vocab: int = 300):
    from mlx_lm.models import qwen3

    mx.random.seed(0)
    args = qwen3.ModelArgs(model_type="qwen3", hidden_size=32, num_hidden_layers=2, intermediate_size=64,
                           num_attention_heads=4, rms_norm_eps=1e-6, vocab_size=vocab, num_key_value_heads=2,
                           max_position_embeddings=256, rope_theta=10000.0, head_dim=8, tie_word_embeddings=True)
    model = qwen3.Model(args)
    mx.eval(model.parameters())
    model.train()
    return model


def _micro_batches(vocab: int = 300):
    from grpo_tui.worker.engine.learning.batch import pack

    out = []
    for seed in (4, 5):
        rng = np.random.default_rng(seed)
        heads = [[int(t) for t in rng.integers(3, vocab, int(rng.integers(4, 10)))] for _ in range(2)]
        prompts = [h for h in heads for _ in range(4)]
        completions = [[int(t) for t in rng.integers(3, vocab, int(rng.integers(2, 9)))] for _ in prompts]
        advantages = [float(a) for a in rng.normal(size=len(prompts))]
        out.append(pack(prompts, completions, advantages, [i != 3 for i in range(len(prompts))], group=4))
    return out


def _pass(loss_type: str, quantile: float, **plan_changes):
    import mlx.optimizers as optim
    from mlx.utils import tree_flatten

    from grpo_tui.worker.engine.models import plan as engine_plan
    from grpo_tui.worker.engine.learning.update import optimize_pass

    config = parse_config(TRAIN_CONFIG.format(loss_type=loss_type, quantile=quantile), check_paths=False)
    model = _model()
    plan = dataclasses.replace(engine_plan.decide(model, config), compiled_loss=False, two_streams=False)
    plan = dataclasses.replace(plan, **plan_changes)
    batches = _micro_batches()
    result = optimize_pass(model, optim.SGD(learning_rate=1.0), batches, config, plan, record_old=False)
    return result, dict(tree_flatten(model.trainable_parameters())), batches


@pytest.mark.parametrize("loss_type", ["grpo", "dapo"])
def test_the_training_pass_masks_the_same_tokens_whole_or_in_parts(loss_type):
    """The loss sees the micro-batch whole, in two_cores' halves, in logprob_batch_size's pieces or
    compiled: the same high-entropy tokens, so the same loss and update; the mask keeps about a
    fifth of the counted tokens and changes the update."""
    whole, params, batches = _pass(loss_type, 0.2)
    for changes in ({"two_streams": True}, {"logprob_batch_size": 3}, {"compiled_loss": True}):
        other, other_params, _ = _pass(loss_type, 0.2, **changes)
        assert other.loss == pytest.approx(whole.loss, rel=1e-5, abs=1e-7), changes
        for name, p in params.items():
            np.testing.assert_allclose(np.array(other_params[name]), np.array(p), atol=1e-6, rtol=1e-4, err_msg=name)
    for b in batches:
        kept, counted = float(mx.sum(b.entropy_mask).item()), float(mx.sum(b.mask).item())
        assert abs(kept - 0.2 * counted) <= 1.0
    everything, every_params, _ = _pass(loss_type, 1.0)
    assert abs(everything.loss - whole.loss) > 1e-5
    assert whole.stats["entropy"] == pytest.approx(everything.stats["entropy"], rel=1e-5)  # the metric: every token
