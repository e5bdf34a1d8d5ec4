"""The vocabulary log-softmax on the host (numpy) gives MLX's log-probs, entropy and gradients."""

import mlx.core as mx
import numpy as np
import pytest
from mlx.utils import tree_flatten

from grpo_tui.protocol.config import ModelConfig, parse_config
from grpo_tui.worker.engine.learning import chunked_head
from grpo_tui.worker.engine.models import model_io
from grpo_tui.worker.engine.accel import host_vocab
from grpo_tui.worker.engine.learning.logps import _logps_entropy
from grpo_tui.worker.engine.learning.grpo import LossSettings
from grpo_tui.worker.engine.models.plan import Head
from tests.helpers.loss_cases import STREAMS_CONFIG, loss_and_grad, reference_is_top, reference_logps_entropy, stream_batch
from tests.helpers.tiny_model import build_tiny_model


def test_logps_and_entropy_match_float64_and_the_gradient_matches_mlx():
    x = mx.random.normal((7, 9000), key=mx.random.key(0)) * 3
    targets = mx.random.randint(0, 9000, (7,), key=mx.random.key(1))
    weights = mx.random.normal((7,), key=mx.random.key(2))
    targets[::2] = mx.argmax(x[::2], axis=1)  # half the rows pick their most likely token
    logps, entropy, is_top = host_vocab.logps_entropy(x, targets)
    want_logps, want_entropy = reference_logps_entropy(np.array(x), np.array(targets))
    np.testing.assert_allclose(np.array(logps), want_logps, atol=2e-5)
    np.testing.assert_allclose(np.array(entropy), want_entropy, atol=1e-4)
    np.testing.assert_array_equal(np.array(is_top), reference_is_top(np.array(x), np.array(targets)))
    assert np.array(is_top)[::2].all()

    def loss(fn):
        return lambda x: mx.sum(fn(x, targets)[0] * weights)

    np.testing.assert_allclose(np.array(mx.grad(loss(host_vocab.logps_entropy))(x)),
                               np.array(mx.grad(loss(_logps_entropy))(x)), atol=1e-5)


def test_gradients_built_before_evaluation_keep_their_own_values():
    """The host buffer is reused between calls; each gradient must own its numbers."""
    targets = mx.array([1, 2, 3])
    xs = [mx.random.normal((3, 500), key=mx.random.key(k)) for k in range(3)]
    host = [mx.grad(lambda x: mx.sum(host_vocab.logps_entropy(x, targets)[0]))(x) for x in xs]
    plain = [mx.grad(lambda x: mx.sum(_logps_entropy(x, targets)[0]))(x) for x in xs]
    mx.eval(host, plain)
    for h, p in zip(host, plain):
        np.testing.assert_allclose(np.array(h), np.array(p), atol=1e-6)


def test_the_host_buffer_is_kept_between_steps():
    first = host_vocab.scratch((4, 100))
    assert np.shares_memory(first, host_vocab.scratch((4, 100)))
    assert np.shares_memory(first, host_vocab.scratch((2, 50)))  # smaller shapes reuse it too


def test_more_logits_than_the_old_64m_cap_match_mlx_in_chunks_with_a_bounded_buffer():
    """460 positions of Qwen's 151,936 vocabulary (70M logits: the old cap sent this to MLX's slow
    exp): the chunked numpy path gives MLX's log-probs, entropy and gradient, and its host buffer
    holds one chunk."""
    rows, vocab = 460, 151_936
    assert rows * vocab > 64 * 2**20
    x = mx.random.normal((rows, vocab), key=mx.random.key(3)) * 2
    targets = mx.random.randint(0, vocab, (rows,), key=mx.random.key(4))
    weights = mx.random.normal((rows,), key=mx.random.key(5))
    host_vocab._SCRATCH.pop("log-softmax", None)
    logps, entropy, _ = host_vocab.logps_entropy(x, targets)
    want_logps, want_entropy, _ = _logps_entropy(x, targets)
    # float32 sums over 151,936 entries: MLX's and numpy's log-probs agree to ~4e-6 relative; the
    # entropies to ~1e-4, numpy's within 1e-4 of float64 (MLX's sequential sum: ~1e-3 off)
    np.testing.assert_allclose(np.array(logps), np.array(want_logps), rtol=1e-5)
    np.testing.assert_allclose(np.array(entropy), np.array(want_entropy), rtol=3e-4)
    exact_logps, exact_entropy = reference_logps_entropy(np.array(x[:16]), np.array(targets[:16]))
    np.testing.assert_allclose(np.array(logps[:16]), exact_logps, rtol=1e-5)
    np.testing.assert_allclose(np.array(entropy[:16]), exact_entropy, atol=3e-4)
    assert host_vocab._SCRATCH["log-softmax"].size <= host_vocab.chunk_rows(vocab) * vocab < rows * vocab
    host_grad = mx.grad(lambda x: mx.sum(host_vocab.logps_entropy(x, targets)[0] * weights))(x)
    mlx_grad = mx.grad(lambda x: mx.sum(_logps_entropy(x, targets)[0] * weights))(x)
    excess = mx.max(mx.abs(host_grad - mlx_grad) - (1e-7 + 1e-4 * mx.abs(mlx_grad)))  # no 70M-entry copies
    assert excess.item() <= 0


@pytest.mark.parametrize("compiled, chunk_bytes", [(False, host_vocab.CHUNK_BYTES), (True, host_vocab.CHUNK_BYTES),
                                                   (False, 3 * 4 * 300)])
def test_the_loss_gradient_is_the_same_with_and_without_the_host_path(tmp_path, monkeypatch, compiled, chunk_bytes):
    """Also with chunks of 3 positions (the step's positions in several chunks and a remainder).
    A head the host head cannot take (quantized, biased) is what hands numpy the logits."""
    monkeypatch.setattr(host_vocab, "CHUNK_BYTES", chunk_bytes)
    monkeypatch.setattr(chunked_head, "plain_weight", lambda model: None)
    model = model_io.load(ModelConfig(path=str(build_tiny_model(tmp_path))))[0]
    config = parse_config(STREAMS_CONFIG.format(loss_type="grpo"), check_paths=False)
    batch = stream_batch(model.args.vocab_size, 5, 2)
    monkeypatch.setattr(host_vocab, "MIN_VOCABULARY", 2)  # the tiny model's vocabulary qualifies
    results = {}
    for switch in ("1", "0"):  # the plan's host_vocab on and off (test_plan: the switch)
        (loss, logps, metrics), grads = loss_and_grad(
            model, batch, LossSettings.from_config(config), config.generation.temperature, 40.0, 1,
            compiled=compiled, head=Head.HOST_VOCAB if switch == "1" else Head.MLX)
        mx.eval(loss, logps, metrics, grads)
        results[switch] = (loss.item(), np.array(logps), metrics["entropy"].item(), dict(tree_flatten(grads)))
    host, plain = results["1"], results["0"]
    assert host[0] == pytest.approx(plain[0], rel=1e-5, abs=1e-7)
    np.testing.assert_allclose(host[1], plain[1], atol=1e-5)
    assert host[2] == pytest.approx(plain[2], rel=1e-4)
    for name, g in plain[3].items():
        np.testing.assert_allclose(np.array(host[3][name]), np.array(g), atol=1e-6, rtol=1e-4, err_msg=name)
