"""The fused LM head's backward keeps few vocabulary-sized arrays (worker/engine/learning/chunked_head.py)."""

import mlx.core as mx
import numpy as np

from grpo_tui.worker.engine.learning import chunked_head


def _peak_above_inputs(run) -> int:
    mx.eval(run())  # compiled kernels built before the measurement
    mx.synchronize()
    mx.reset_peak_memory()
    base = mx.get_active_memory()
    mx.eval(run())
    return mx.get_peak_memory() - base


def _chunk_input():
    keys = mx.random.split(mx.random.key(11), 4)
    logits = mx.random.normal((64, 40_000), key=keys[0]) * 3
    targets = mx.random.randint(0, 40_000, (64,), key=keys[1])
    cotangent = mx.random.normal((64,), key=keys[2])
    lse = mx.logsumexp(logits, axis=-1)
    mx.eval(logits, targets, cotangent, lse)
    return logits, lse, targets, cotangent


def test_the_logits_gradient_is_cotangent_times_onehot_minus_softmax():
    logits, lse, targets, cotangent = _chunk_input()
    got = np.array(chunked_head.logits_gradient(logits, lse, targets, cotangent))
    x = np.array(logits, dtype=np.float64)
    softmax = np.exp(x - x.max(-1, keepdims=True))
    softmax /= softmax.sum(-1, keepdims=True)
    onehot = np.zeros_like(x)
    onehot[np.arange(len(x)), np.array(targets)] = 1.0
    want = np.array(cotangent, dtype=np.float64)[:, None] * (onehot - softmax)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=2e-5)  # e ** x: ~3e-6 relative


def test_the_heads_exp_is_exact_to_float32_over_its_range():
    x = np.linspace(-88.0, 10.0, 200_001).astype(np.float32)
    got = np.array(chunked_head._exp(mx.array(x)), dtype=np.float64)
    want = np.exp(x.astype(np.float64))
    assert np.max(np.abs(got - want) / want) < 4e-6
    assert chunked_head._exp(mx.array([-np.inf])).item() == 0.0  # a masked logit


def test_the_logits_gradient_scatters_into_its_own_buffer():
    # The targets' entries were read back from the gradient array, a second reader, so the scatter
    # copied it: five arrays of the logits' size at the peak against four.
    logits, lse, targets, cotangent = _chunk_input()
    peak = _peak_above_inputs(lambda: chunked_head.logits_gradient(logits, lse, targets, cotangent))
    assert peak < 4.5 * logits.nbytes


def _head_gradient_peak(width: int, positions: int) -> float:
    """The peak of a fused head's and 24 stand-in blocks' gradient, in chunks of logits."""
    vocabulary, chunk, blocks = 32_768, 128, 24
    keys = mx.random.split(mx.random.key(3), 4)
    weight = mx.random.normal((vocabulary, width), key=keys[0]) * 0.02
    inputs = mx.random.normal((positions, width), key=keys[1])
    matrices = [mx.random.normal((width, width), key=k) * 0.05 for k in mx.random.split(keys[2], blocks)]
    targets = mx.random.randint(0, vocabulary, (positions,), key=keys[3])
    mx.eval(weight, inputs, matrices, targets)
    head = chunked_head._function(chunk, 1.0, True, None, True)

    def loss(weight, matrices):
        hidden = inputs
        for matrix in matrices:  # stands in for the blocks whose backward the hidden gradient feeds
            hidden = mx.tanh(hidden @ matrix) + hidden
        return mx.sum(head(hidden, (weight,), targets)[0])

    gradient = mx.grad(loss, argnums=(0, 1))
    return _peak_above_inputs(lambda: gradient(weight, matrices)) / (chunk * vocabulary * 4)


def test_the_head_weight_gradient_runs_with_its_chunk_not_after_the_blocks():
    # MLX orders a graph from its outputs back, so the weight gradient's running sum, which nothing
    # on the way to the blocks' backward waited for, ran after all of it, and every chunk's logits
    # gradient stayed alive until then: 15.5 chunks of logits at the peak against 13.5.
    assert _head_gradient_peak(width=256, positions=768) < 14.5


def test_fewer_positions_than_the_hidden_size_sum_with_each_chunk_too():
    # Kept for one product at the end, the logits' gradients, their concatenation and the product
    # existed at once after the blocks' backward: 34.1 chunks of logits at the peak against 26.4.
    assert _head_gradient_peak(width=1024, positions=768) < 30
