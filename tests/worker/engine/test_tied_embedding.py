"""A tied embedding's lookup gradient, taken apart and folded into the head's gradient
(``tied_embedding``), equals MLX's own gradient of the model, on every head and layout, eager and
compiled, through the training pass; and it keeps a vocabulary-sized array out of the peak."""

import dataclasses

import mlx.core as mx
import mlx.nn as nn
import mlx.optimizers as optim
import numpy as np
import pytest
from mlx_lm.models import qwen3

from grpo_tui.worker.engine.learning import gradient_checkpointing as checkpointing, chunked_head, tied_embedding
from grpo_tui.worker.engine.models import plan as engine_plan
from grpo_tui.worker.engine.learning.batch import pack
from tests.helpers.same_update import assert_same_update
from grpo_tui.worker.engine.models.plan import Head
from tests.helpers.loss_cases import (
    assert_same, grads, host_head_of, sgd_update, small_model, switch_batch, switch_config,
)


@pytest.fixture
def mlx_s_own_gradient(monkeypatch):
    """Turns the fold off: the embedding is differentiated by MLX through both of its uses."""
    def turn_off():
        monkeypatch.setattr(tied_embedding, "applies", lambda model: False)
    return turn_off


@pytest.mark.parametrize("head", ["mlx", "fused", "numpy", "chunks"])
@pytest.mark.parametrize("group", [4, 1], ids=["shared-prompt", "plain"])
def test_the_folded_gradient_is_mlx_s(head, group, mlx_s_own_gradient):
    model, config = small_model(False), switch_config("bnpo")
    options = {"mlx": {}, "fused": {"head": Head.FUSED}, "numpy": {"head": host_head_of(model)},
               "chunks": {"head": Head.CHUNKED, "vocab_chunk": 5}}[head]
    assert tied_embedding.applies(model)
    batch = switch_batch(6, 2, group)
    folded = grads(model, batch, config, **options)
    mlx_s_own_gradient()
    assert_same(folded, grads(model, batch, config, **options))


def test_the_compiled_loss_folds_the_same_gradient(mlx_s_own_gradient):
    model, config = small_model(False), switch_config("dapo")
    batch = switch_batch(7, 2)
    folded = grads(model, batch, config, compiled=True)
    mlx_s_own_gradient()
    assert_same(folded, grads(model, batch, config, compiled=True))


def test_lora_and_a_4_bit_embedding_keep_mlx_s_path():
    lora = small_model(True)
    assert not tied_embedding.applies(lora)  # its embedding is frozen: no gradient to fold
    quantized = small_model(False)
    nn.quantize(quantized, group_size=32, bits=4)
    assert not tied_embedding.applies(quantized)
    assert not tied_embedding.applies(small_model(False, tie=False))


@pytest.mark.parametrize("switches", [False, True], ids=["default", "switches"])
def test_the_training_pass_folds_every_micro_batch(switches, mlx_s_own_gradient):
    """Two micro-batches (each one's lookup is folded after its gradient is evaluated, into the
    sum so far), with and without the memory switches: the update is MLX's."""
    config = switch_config("dapo")
    results = []
    for fold in (True, False):
        if not fold:
            mlx_s_own_gradient()
        model = small_model(False)
        plan = dataclasses.replace(engine_plan.decide(model, config), compiled_loss=False, two_streams=False,
                                   head=Head.FUSED)
        if switches:
            plan = dataclasses.replace(plan, gradient_checkpointing=True, head=Head.CHUNKED, vocab_chunk_size=6,
                                       logprob_batch_size=3)
            checkpointing.checkpoint_blocks(model)
        results.append(sgd_update(model, config, plan, [switch_batch(seed, 2) for seed in (8, 9)]))
    assert_same_update(results[0], results[1], atol=1e-6, rtol=1e-4)


class _PeakAtUpdate(optim.SGD):
    """SGD that notes MLX's peak memory when the gradient is complete (the update's own copies aside)."""

    def update(self, model, gradients):
        self.peak = mx.get_peak_memory()
        super().update(model, gradients)


def test_the_fold_keeps_the_lookup_s_dense_gradient_out_of_the_peak(monkeypatch, mlx_s_own_gradient):
    # MLX differentiates the lookup into a dense (vocabulary, hidden) scatter and adds it to the
    # head's gradient: one more array of the head's size, two where the sum is not done in place
    # (the 28-layer 0.6B step: 10.74 -> 9.60 GiB). Since the fused head sums its weight gradient
    # with each chunk (chunked_head), this small step peaks in the head's backward either way, so
    # here the fold must not cost more; the dense scatter at the end still would on a large step.
    vocabulary, hidden = 60_000, 128
    mx.random.seed(0)
    args = qwen3.ModelArgs(model_type="qwen3", hidden_size=hidden, num_hidden_layers=1, intermediate_size=128,
                           num_attention_heads=2, rms_norm_eps=1e-6, vocab_size=vocabulary, num_key_value_heads=1,
                           max_position_embeddings=512, rope_theta=10000.0, head_dim=64, tie_word_embeddings=True)
    config = switch_config("grpo")
    monkeypatch.setattr(chunked_head, "FUSED_CHUNK_BYTES", 8 * 4 * vocabulary)  # small logits: the head dominates
    rng = np.random.default_rng(0)
    batch = pack([[5, 6, 7, 8]] * 4, [[int(t) for t in rng.integers(3, vocabulary, 12)] for _ in range(4)],
                 [1.0, -1.0, 0.5, -0.5], [True] * 4, group=4)
    peaks = []
    for fold in (True, False):
        if not fold:
            mlx_s_own_gradient()
        model = qwen3.Model(args)
        mx.eval(model.parameters())
        model.train()
        plan = dataclasses.replace(engine_plan.decide(model, config), compiled_loss=False, two_streams=False,
                                   head=Head.FUSED)
        optimizer = _PeakAtUpdate(learning_rate=0.1)
        mx.synchronize()
        mx.reset_peak_memory()
        sgd_update(model, config, plan, [batch], optimizer)
        peaks.append(optimizer.peak)
        del model
    head_bytes = vocabulary * hidden * 4
    assert peaks[0] < peaks[1] + 0.05 * head_bytes
