"""The LM head and log-softmax in numpy, a block of vocabulary at a time (``accel.host_head``), give
the unchunked path's log-probs, entropy, loss and gradients (full and LoRA, tied and untied heads),
and the logits never exist whole in MLX memory."""

import mlx.core as mx
import numpy as np
import pytest
from mlx_lm.models import qwen3

from grpo_tui.worker.engine.learning import chunked_head
from grpo_tui.worker.engine.accel import host_head, host_vocab
from grpo_tui.worker.engine.learning.batch import pack
from grpo_tui.worker.engine.learning.logps import _logps_entropy
from grpo_tui.worker.engine.models.plan import Head
from tests.helpers.loss_cases import (
    assert_same, grads, host_head_of, reference_is_top, reference_logps_entropy, small_model, switch_batch, switch_config,
)


@pytest.fixture
def small_blocks(monkeypatch):
    monkeypatch.setattr(host_head, "BLOCK", 700)  # 5000 = 7 blocks and a remainder of 100


def test_log_probs_entropy_and_gradients_match_the_whole_logits(small_blocks):
    hidden = mx.random.normal((3, 13, 16), key=mx.random.key(0))
    weight = mx.random.normal((5000, 16), key=mx.random.key(1)) * 0.5
    targets = mx.concatenate([mx.array([[4999, 0, 699, 700]] * 3), mx.random.randint(0, 5000, (3, 9), key=mx.random.key(2))], 1)
    targets[:, -1] = mx.argmax(hidden[:, -1] @ weight.T, axis=-1)  # the last position picks its most likely token
    cotangent = mx.random.normal((3, 13), key=mx.random.key(3))
    temperature = 0.7

    def ours(h, w):
        logps, entropy, is_top = host_head.logps_entropy(h, w, targets, temperature, weight_grad=True)
        return mx.sum(logps * cotangent), (logps, entropy, is_top)

    def whole(h, w):
        logps, entropy, is_top = _logps_entropy((h @ w.T) / temperature, targets)
        return mx.sum(logps * cotangent), (logps, entropy, is_top)

    (loss, (logps, entropy, is_top)), grads = mx.value_and_grad(ours, argnums=(0, 1))(hidden, weight)
    (want_loss, _), want_grads = mx.value_and_grad(whole, argnums=(0, 1))(hidden, weight)
    logits = np.array((hidden @ weight.T) / temperature).reshape(-1, 5000)
    exact_logps, exact_entropy = reference_logps_entropy(logits, np.array(targets).reshape(-1))
    np.testing.assert_allclose(np.array(logps).reshape(-1), exact_logps, atol=2e-5)
    np.testing.assert_allclose(np.array(entropy).reshape(-1), exact_entropy, atol=1e-4)
    want_top = reference_is_top(logits, np.array(targets).reshape(-1))
    np.testing.assert_array_equal(np.array(is_top).reshape(-1), want_top)
    assert np.array(is_top)[:, -1].all()
    assert loss.item() == pytest.approx(want_loss.item(), rel=1e-5)
    for got, want in zip(grads, want_grads):
        np.testing.assert_allclose(np.array(got), np.array(want), atol=2e-5, rtol=1e-4)


def test_a_frozen_head_gets_no_weight_gradient(small_blocks):
    hidden, weight = mx.random.normal((2, 5, 8)), mx.random.normal((1500, 8))
    targets = mx.random.randint(0, 1500, (2, 5))
    grad = mx.grad(lambda w: mx.sum(host_head.logps_entropy(hidden, w, targets, 1.0, weight_grad=False)[0]))(weight)
    assert not mx.any(grad).item()


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
@pytest.mark.parametrize("group", [4, 1], ids=["shared-prompt", "plain"])
@pytest.mark.parametrize("tie", [True, False], ids=["tied", "untied"])
def test_the_loss_and_gradients_equal_the_mlx_path(small_blocks, monkeypatch, lora, group, tie):
    """Through the real loss: ``host`` (the plan's host_vocab) on a plain head takes the host head
    (the tied embedding's gradient is its lookup's plus the head's), and equals the MLX path."""
    calls = []
    forward = host_head.forward
    monkeypatch.setattr(host_head, "forward", lambda *a: calls.append(1) or forward(*a))
    monkeypatch.setattr(host_vocab, "logps_entropy", None)  # the logits path must not run
    model, config = small_model(lora, tie=tie), switch_config("dapo")
    assert chunked_head.supports(model)
    batch = switch_batch(3, 2, group)
    assert_same(grads(model, batch, config, head=Head.HOST_HEAD), grads(model, batch, config))
    assert calls


def test_the_logits_never_exist_whole_in_mlx_memory():
    mx.random.seed(0)
    vocabulary = 151_936
    args = qwen3.ModelArgs(model_type="qwen3", hidden_size=32, num_hidden_layers=1, intermediate_size=64,
                           num_attention_heads=2, rms_norm_eps=1e-6, vocab_size=vocabulary, num_key_value_heads=1,
                           max_position_embeddings=512, rope_theta=10000.0, head_dim=16, tie_word_embeddings=True)
    model, config = qwen3.Model(args), switch_config("grpo")
    mx.eval(model.parameters())
    model.train()
    rng = np.random.default_rng(0)
    batch = pack([[5, 6, 7]] * 8, [[int(t) for t in rng.integers(3, vocabulary, 48)] for _ in range(8)], [1.0] * 8,
                 [True] * 8, group=1)
    peaks = {}
    for host in (False, True):
        mx.synchronize()
        mx.reset_peak_memory()
        grads(model, batch, config, head=host_head_of(model) if host else Head.MLX)
        peaks[host] = mx.get_peak_memory()
    logits_bytes = 8 * 50 * vocabulary * 4  # 243 MB
    weight_bytes = vocabulary * 32 * 4  # 19 MB: the weight, its gradient, the embedding's
    assert peaks[True] < logits_bytes / 2 and peaks[True] < peaks[False] - 2 * logits_bytes
    assert peaks[True] < 8 * weight_bytes


def test_a_bfloat16_model_gets_bfloat16_gradients_of_the_float32_values(small_blocks):
    hidden, weight = mx.random.normal((2, 5, 8)), mx.random.normal((1500, 8))
    targets = mx.random.randint(0, 1500, (2, 5))

    def grads(dtype):
        fn = lambda h, w: mx.sum(host_head.logps_entropy(h, w, targets, 1.0, weight_grad=True)[0])
        return mx.grad(fn, argnums=(0, 1))(hidden.astype(dtype), weight.astype(dtype))

    half, full = grads(mx.bfloat16), grads(mx.float32)
    for got, want in zip(half, full):
        assert got.dtype == mx.bfloat16
        np.testing.assert_allclose(np.array(got.astype(mx.float32)), np.array(want), atol=0.05, rtol=0.05)
