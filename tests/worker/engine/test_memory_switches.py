"""The memory switches of ``[training]`` (gradient checkpointing, the chunked LM head and
log-softmax, the log-prob batch size) compute the unsplit path's loss, log-probs, metrics and
gradients, for full and LoRA fine-tuning, on a tiny model with a 5000-token vocabulary."""

import dataclasses

import mlx.core as mx
import mlx.nn as nn
import numpy as np
import pytest
from mlx_lm.models import qwen3

from grpo_tui.worker.engine.learning import gradient_checkpointing as checkpointing, chunked_head
from grpo_tui.worker.engine.models import plan as engine_plan
from grpo_tui.worker.engine.learning.batch import pack, row_parts
from grpo_tui.worker.engine.models.plan import Head
from tests.helpers.same_update import assert_same_update
from tests.helpers.loss_cases import (
    G, VOCAB, add_lora, assert_same, grads, head_gradient_peak, host_head_of, sgd_update, small_model, switch_batch, switch_config,
)


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
@pytest.mark.parametrize("group", [G, 1], ids=["shared-prompt", "plain"])
@pytest.mark.parametrize("host", [False, True], ids=["mlx", "numpy"])
def test_the_chunked_head_equals_the_whole_vocabulary(lora, group, host):
    model, config = small_model(lora), switch_config("bnpo")
    batch = switch_batch(0, 2, group)
    whole = grads(model, batch, config, head=host_head_of(model) if host else Head.MLX)
    chunked = grads(model, batch, config, head=Head.CHUNKED, vocab_chunk=7)  # 7 does not divide the positions
    assert_same(chunked, whole)
    if lora:
        assert not any("embed" in name for name in chunked[3])


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
@pytest.mark.parametrize("tie", [True, False], ids=["tied", "untied"])
def test_the_fused_head_equals_mlx_s_log_softmax(lora, tie):
    """The large-model default (one exp over the vocabulary, the softmax kept for the backward)
    computes MLX's own log-softmax path's loss, log-probs, entropy and gradients."""
    model, config = small_model(lora, tie=tie), switch_config("bnpo")
    batch = switch_batch(2, 2)
    fused = grads(model, batch, config, head=Head.FUSED)
    assert_same(fused, grads(model, batch, config))
    assert fused[2]["entropy"] > 1.0  # a near-uniform random model: the metric is really computed


@pytest.mark.parametrize("tie", [True, False], ids=["tied", "untied"])
def test_a_4_bit_head_is_fused_and_chunked_like_mlx_s_ops(tie):
    """QLoRA on an mlx-community 4-bit model: its quantized head gets the fused and chunked paths."""
    mx.random.seed(3)
    model = small_model(False, tie=tie)
    nn.quantize(model, group_size=32, bits=4)
    add_lora(model)
    assert chunked_head.supports(model) and chunked_head.head_of(model)[1] == (32, 4, "affine")
    config, batch = switch_config("dapo"), switch_batch(4, 2)
    whole = grads(model, batch, config)
    assert_same(grads(model, batch, config, head=Head.FUSED), whole)
    assert_same(grads(model, batch, config, head=Head.CHUNKED, vocab_chunk=6), whole)


def test_an_untied_head_chunks_too():
    model, config = small_model(False, tie=False), switch_config("grpo")
    assert chunked_head.supports(model)
    batch = switch_batch(1, 2)
    assert_same(grads(model, batch, config, head=Head.CHUNKED, vocab_chunk=5), grads(model, batch, config))


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
@pytest.mark.parametrize("group", [G, 1], ids=["shared-prompt", "plain"])
def test_checkpointed_blocks_give_the_same_gradients(lora, group):
    config = switch_config("dapo")
    batch = switch_batch(2, 2, group)
    plain = grads(small_model(lora), batch, config)
    model = small_model(lora)
    assert checkpointing.checkpoint_blocks(model) and checkpointing.is_checkpointed(model)
    assert_same(grads(model, batch, config), plain)
    model.eval()  # the rollout runs the plain blocks (no mx.checkpoint outside training)
    assert model(batch.targets).shape == (*batch.targets.shape, VOCAB)


def test_row_parts_cover_the_batch():
    batch = switch_batch(3, 3)  # 12 completions, groups of 4
    assert row_parts(batch, 0) == [batch] and row_parts(batch, 12) == [batch]
    whole_groups = row_parts(batch, 8)
    assert [p.targets.shape[0] for p in whole_groups] == [8, 4]
    assert [p.prompts.shape[0] for p in whole_groups] == [2, 1]
    inside = row_parts(batch, 3)
    assert [p.targets.shape[0] for p in inside] == [3, 1] * 3 and [p.group for p in inside] == [3, 1] * 3
    plain = row_parts(switch_batch(3, 3, group=1), 5)
    assert [p.targets.shape[0] for p in plain] == [5, 5, 2]
    np.testing.assert_array_equal(np.concatenate([np.array(p.targets) for p in inside]), np.array(batch.targets))


@pytest.mark.parametrize("loss_type", ["grpo", "bnpo", "dr_grpo", "dapo"])
@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_every_switch_together_trains_like_none(loss_type, lora):
    config = switch_config(loss_type)
    results = {}
    for on in (False, True):
        model = small_model(lora)
        plan = engine_plan.decide(model, config)
        plan = dataclasses.replace(plan, compiled_loss=False, two_streams=False)
        if on:
            plan = dataclasses.replace(plan, gradient_checkpointing=True, head=Head.CHUNKED, vocab_chunk_size=6,
                                       logprob_batch_size=3)
            checkpointing.checkpoint_blocks(model)
        batches = [switch_batch(seed, 2) for seed in (4, 5)]
        results[on] = sgd_update(model, config, plan, batches)
    assert_same_update(results[True], results[False], atol=1e-6, rtol=1e-4)


def test_the_plan_names_the_switches_and_drops_the_compiled_loss():
    model = small_model(False)
    plain = engine_plan.decide(model, switch_config())
    assert "chunks" not in plain.describe() and "checkpointing" not in plain.describe()
    plan = engine_plan.decide(model, switch_config(training="gradient_checkpointing = true\nvocab_chunk_size = 64\n"
                                                      "logprob_batch_size = 2"))
    assert plan.gradient_checkpointing and plan.vocab_chunk_size == 64 and plan.logprob_batch_size == 2
    assert not plan.compiled_loss
    text = plan.describe()
    for words in ("gradient checkpointing", "chunks of 64 positions", "at most 2 completions"):
        assert words in text


def test_the_chunked_head_lowers_the_peak(monkeypatch):
    # Evaluated per chunk inside the gradient transform, every chunk's logits stayed alive and the
    # chunked step peaked above the unchunked one; lazily ordered, it stays below.
    mx.random.seed(0)
    args = qwen3.ModelArgs(model_type="qwen3", hidden_size=32, num_hidden_layers=1, intermediate_size=64,
                           num_attention_heads=2, rms_norm_eps=1e-6, vocab_size=100_000, num_key_value_heads=1,
                           max_position_embeddings=512, rope_theta=10000.0, head_dim=16, tie_word_embeddings=True)
    model, config = qwen3.Model(args), switch_config("grpo")
    mx.eval(model.parameters())
    model.train()
    rng = np.random.default_rng(0)
    batch = pack([[5, 6, 7]] * 8, [[int(t) for t in rng.integers(3, 100_000, 48)] for _ in range(8)], [1.0] * 8,
                 [True] * 8, group=1)
    # The fused head's chunks are 128 MB of logits, here the whole batch: make them 16 positions.
    monkeypatch.setattr(chunked_head, "FUSED_CHUNK_BYTES", 16 * 4 * 100_000)
    peaks = {}
    for name, options in {"mlx": {}, "chunks of 16": {"head": Head.CHUNKED, "vocab_chunk": 16}, "fused": {"head": Head.FUSED}}.items():
        mx.synchronize()
        mx.reset_peak_memory()
        grads(model, batch, config, **options)
        peaks[name] = mx.get_peak_memory()
    logits_bytes = 8 * 50 * 100_000 * 4
    assert peaks["chunks of 16"] < peaks["mlx"] - 2 * logits_bytes
    # The large-model default: all positions at once kept several vocabulary-sized arrays alive (the
    # 4-layer 0.6B memory step went from 9.4 to 14.2 GiB); in 128 MB chunks it is below MLX's own ops.
    assert peaks["fused"] < peaks["mlx"] - 2 * logits_bytes


@pytest.mark.parametrize("in_place", [False, True], ids=["ordered-sum", "in-place-sum"])
@pytest.mark.parametrize("positions", [40, 100], ids=["fewer-than-hidden", "more-than-hidden"])
def test_the_head_weight_gradient_is_the_same_kept_whole_or_summed_by_chunk(positions, in_place):
    # Up to the hidden size the logits' gradients are kept for one matmul, beyond it each chunk's
    # (vocabulary, hidden) part is summed (in place for the fused head): either way the gradient
    # of MLX's own log-softmax.
    mx.random.seed(positions)
    weight, hidden = mx.random.normal((VOCAB, 64)) * 0.1, mx.random.normal((positions, 64))
    targets, weights = mx.random.randint(0, VOCAB, (positions,)), mx.random.normal((positions,))
    fused = chunked_head._function(16, 1.0, True, None, in_place)

    def chunked(w):
        return mx.sum(fused(hidden, (w,), targets)[0] * weights)

    def plain(w):
        logits = hidden @ w.T
        picked = mx.take_along_axis(logits, targets[:, None], axis=-1)[:, 0]
        return mx.sum((picked - mx.logsumexp(logits, axis=-1)) * weights)

    np.testing.assert_allclose(np.array(mx.grad(chunked)(weight)), np.array(mx.grad(plain)(weight)), atol=1e-5)


def test_the_fused_head_sums_its_weight_gradient_in_place():
    # Ordered after the running sum, each chunk's part was a second (vocabulary, hidden) array
    # beside it (the 0.5B bench step's head gradient: 2.29 against 1.53 GiB). With MLX's queue
    # running chunks ahead (no chunked_head.QUEUE_GAP) the sum was copied while its previous term
    # was queued: 5.55 head-sized arrays at the peak against 4.5, the ordered sum's 4.55.
    head_bytes = 32_768 * 512 * 4
    in_place = head_gradient_peak(in_place=True)
    assert in_place < 5 * head_bytes
    assert in_place <= head_gradient_peak(in_place=False) + 0.1 * head_bytes
