"""The keyed sampler (worker/engine/sampling.py): the law of mx.random.categorical, noise that never
overflows, and a row's tokens independent of the batch it is in."""

from __future__ import annotations

import mlx.core as mx
import numpy as np

from grpo_tui.protocol.config import GenerationConfig
from grpo_tui.worker.engine import sampling


def test_uniforms_stay_strictly_inside_the_unit_interval():
    u = np.array(sampling.unit_interval(mx.array([0, 1, 0xFFFFFFFE, 0xFFFFFFFF], dtype=mx.uint32)))
    assert (u > 0).all() and (u < 1).all()


def test_a_dominant_token_wins_at_every_position_of_a_qwen_sized_vocabulary():
    # With 24-bit uniforms, u rounded to 1.0 about once per token of a 151,936 vocabulary: infinite
    # Gumbel noise picked a token of probability e^-30 (positions 24 and 28 of this stream did).
    vocab = 151_936
    draw = sampling.KeyedSampler(GenerationConfig(), sampling.step_keys(0, 1, [0], 2))
    for position in range(64):
        target = position * 7919 % vocab
        logits = mx.zeros((2, vocab))
        logits[:, target] = 30.0
        assert draw(logits - mx.logsumexp(logits, axis=-1, keepdims=True)).tolist() == [target, target], position


def test_draws_follow_the_softmax_of_the_logits():
    probs = np.array([0.5, 0.25, 0.15, 0.07, 0.03])
    rows = 4000
    draw = sampling.KeyedSampler(GenerationConfig(temperature=1.0), [sampling.row_key(7, 1, r, 0) for r in range(rows)])
    logprobs = mx.broadcast_to(mx.array(np.log(probs), dtype=mx.float32), (rows, len(probs)))
    counts = np.bincount(np.array(draw(logprobs)), minlength=len(probs)) / rows
    # 4000 draws: a share's standard error is at most 0.8 %; 4 of them is far beyond chance
    np.testing.assert_allclose(counts, probs, atol=0.032)


def test_a_rows_tokens_do_not_depend_on_the_other_rows_of_its_batch():
    gen = GenerationConfig(temperature=1.0)
    logprobs = mx.log(mx.softmax(mx.random.normal((3, 50), key=mx.random.key(0)), axis=-1))
    keys = [sampling.row_key(0, 5, p, 0) for p in range(3)]
    together = sampling.KeyedSampler(gen, keys)(logprobs).tolist()
    alone = [sampling.KeyedSampler(gen, [keys[i]])(logprobs[i : i + 1]).tolist()[0] for i in range(3)]
    assert together == alone
