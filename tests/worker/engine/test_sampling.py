"""The keyed sampler (worker/engine/policy/sampling.py): the law of mlx-lm's sampler (filters, then
mx.random.categorical at the temperature), noise that never overflows, and a row's tokens
independent of the batch it is in, for both draws (``host``: the numpy inverse-CDF the plan runs on
the CPU; else MLX's Gumbel-max)."""

from __future__ import annotations

import math

import mlx.core as mx
import numpy as np
import pytest
from mlx_lm.sample_utils import apply_min_p, apply_top_k, apply_top_p, make_sampler

from grpo_tui.protocol.config import GenerationConfig
from grpo_tui.worker.engine.policy import sampling

BOTH = pytest.mark.parametrize("host", [True, False], ids=["numpy", "mlx"])


def mlx_lm_law(logits: np.ndarray, gen: GenerationConfig) -> np.ndarray:
    """Exact probabilities of mlx-lm's ``make_sampler`` on one row: its filters on the log-probs,
    then categorical(logits / temperature)."""
    lp = mx.array(logits, dtype=mx.float32)[None]
    lp = lp - mx.logsumexp(lp, axis=-1, keepdims=True)
    if gen.top_p < 1.0:
        lp = apply_top_p(lp, gen.top_p)
    if gen.min_p > 0.0:
        lp = apply_min_p(lp, gen.min_p, 1)
    if gen.top_k > 0:
        lp = apply_top_k(lp, gen.top_k)
    z = np.array(lp)[0].astype(np.float64) / gen.temperature
    p = np.exp(z - z.max())
    return p / p.sum()


def counts_of(gen: GenerationConfig, logits: np.ndarray, rows: int, positions: int, host: bool) -> np.ndarray:
    draw = sampling.KeyedSampler(gen, [sampling.row_key(11, 3, r, 1) for r in range(rows)], host=host)
    batch = mx.array(np.broadcast_to(logits.astype(np.float32), (rows, len(logits))).copy())
    counts = np.zeros(len(logits))
    for _ in range(positions):
        counts += np.bincount(np.array(draw(batch)), minlength=len(logits))
    return counts


def chi_square_z(counts: np.ndarray, probs: np.ndarray, bins: list[np.ndarray] | None = None) -> float:
    """The chi-square statistic of ``counts`` against ``probs`` as a standard normal deviate
    (Wilson-Hilferty); ``bins`` groups tokens (default: every token with probability > 0)."""
    bins = bins or [np.array([i]) for i in np.flatnonzero(probs > 0)]
    n = counts.sum()
    observed = np.array([counts[b].sum() for b in bins])
    expected = np.array([probs[b].sum() for b in bins]) * n
    chi, dof = float(((observed - expected) ** 2 / expected).sum()), len(bins) - 1
    return ((chi / dof) ** (1 / 3) - (1 - 2 / (9 * dof))) / math.sqrt(2 / (9 * dof))


SMALL = np.random.default_rng(0).standard_normal(24) * 2
SETTINGS = [
    GenerationConfig(),
    GenerationConfig(temperature=0.6),
    GenerationConfig(top_p=0.8),
    GenerationConfig(min_p=0.1, temperature=1.4),
    GenerationConfig(top_k=5, temperature=0.5),
    GenerationConfig(top_p=0.9, min_p=0.02, top_k=9, temperature=0.8),
]


@BOTH
@pytest.mark.parametrize("gen", SETTINGS, ids=lambda g: f"T{g.temperature}-p{g.top_p}-min{g.min_p}-k{g.top_k}")
def test_draws_follow_mlx_lms_law_with_temperature_and_filters(gen, host):
    counts = counts_of(gen, SMALL, rows=500, positions=24, host=host)  # 12,000 draws
    law = mlx_lm_law(SMALL, gen)
    assert counts[law == 0].sum() == 0  # a filtered token is never drawn
    assert chi_square_z(counts, law) < 3.5  # p > 2e-4; the statistic is deterministic (fixed keys)
    # ... and the test can tell a wrong law: the same draws against the untempered, unfiltered one
    wrong = mlx_lm_law(SMALL, GenerationConfig(temperature=1.0 if gen.temperature != 1.0 else 1.3))
    assert chi_square_z(counts, wrong) > 6


def test_the_numpy_draw_and_mlx_lms_own_sampler_give_the_same_frequencies():
    """Two-sample chi-square against mlx-lm's ``make_sampler`` itself (mx.random, not keyed)."""
    gen = SETTINGS[-1]
    ours = counts_of(gen, SMALL, rows=500, positions=16, host=True)
    sampler = make_sampler(temp=gen.temperature, top_p=gen.top_p, min_p=gen.min_p, top_k=gen.top_k)
    mx.random.seed(5)
    lp = mx.array(np.broadcast_to((SMALL - np.log(np.exp(SMALL).sum())).astype(np.float32), (8000, len(SMALL))).copy())
    theirs = np.bincount(np.array(sampler(lp)), minlength=len(SMALL)).astype(np.float64)
    support = np.flatnonzero(ours + theirs > 0)
    assert set(np.flatnonzero(ours)) == set(np.flatnonzero(theirs))
    a, b = ours[support], theirs[support]
    chi = (((a / a.sum() - b / b.sum()) ** 2) / (a + b) * a.sum() * b.sum()).sum()
    dof = len(support) - 1
    assert ((chi / dof) ** (1 / 3) - (1 - 2 / (9 * dof))) / math.sqrt(2 / (9 * dof)) < 3.5


QWEN_VOCAB = 151_936


def peaked_qwen_row() -> np.ndarray:
    """A model-like row: 30 tokens holding ~99% of the mass over a 151,936 vocabulary."""
    rng = np.random.default_rng(1)
    row = rng.standard_normal(QWEN_VOCAB)
    top = rng.choice(QWEN_VOCAB, 30, replace=False)
    row[top] += np.linspace(14, 9, 30)
    return row


@pytest.mark.parametrize("gen", [GenerationConfig(temperature=0.9), GenerationConfig(top_p=0.9, min_p=0.01, top_k=12, temperature=0.7)],
                         ids=["plain", "filters"])
def test_draws_follow_mlx_lms_law_over_qwens_vocabulary(gen):
    row = peaked_qwen_row()
    counts = counts_of(gen, row, rows=64, positions=60, host=True)  # 3,840 draws
    law = mlx_lm_law(row, gen)
    assert counts[law == 0].sum() == 0
    top = np.argsort(-law)[:20]
    rest = np.setdiff1d(np.flatnonzero(law > 0), top)
    bins = [np.array([t]) for t in top if law[t] * counts.sum() >= 5]
    bins.append(np.setdiff1d(np.concatenate([top, rest]), np.concatenate(bins)))  # the tail as one bin
    bins = [b for b in bins if len(b) and law[b].sum() > 0]
    assert chi_square_z(counts, law, bins) < 3.5


@BOTH
def test_a_dominant_token_wins_at_every_position_of_a_qwen_sized_vocabulary(host):
    # With 24-bit uniforms, u rounded to 1.0 about once per token of a 151,936 vocabulary: infinite
    # Gumbel noise picked a token of probability e^-30 (positions 24 and 28 of this stream did).
    draw = sampling.KeyedSampler(GenerationConfig(), sampling.step_keys(0, 1, [0], 2), host=host)
    for position in range(64):
        target = position * 7919 % QWEN_VOCAB
        logits = mx.zeros((2, QWEN_VOCAB))
        logits[:, target] = 30.0
        assert draw(logits - mx.logsumexp(logits, axis=-1, keepdims=True)).tolist() == [target, target], position


def test_uniforms_stay_strictly_inside_the_unit_interval():
    u = np.array(sampling.unit_interval(mx.array([0, 1, 0xFFFFFFFE, 0xFFFFFFFF], dtype=mx.uint32)))
    assert (u > 0).all() and (u < 1).all()
    keys = np.array([0, 1, 0xFFFFFFFF] * 3, np.uint32)
    u = sampling.host_uniforms(keys, np.repeat(np.array([0, 1, 0xFFFFFFFF], np.uint32), 3))
    assert (u > 0).all() and (u < 1).all() and len(set(u.tolist())) == 9


@BOTH
def test_a_rows_tokens_do_not_depend_on_the_other_rows_of_its_batch(host):
    gen = GenerationConfig(temperature=1.0, top_k=40)
    logprobs = mx.log(mx.softmax(mx.random.normal((3, 50), key=mx.random.key(0)), axis=-1))
    keys = [sampling.row_key(0, 5, p, 0) for p in range(3)]
    together = sampling.KeyedSampler(gen, keys, host=host)(logprobs).tolist()
    alone = [sampling.KeyedSampler(gen, [keys[i]], host=host)(logprobs[i : i + 1]).tolist()[0] for i in range(3)]
    assert together == alone


@BOTH
def test_each_row_can_draw_at_its_own_position(host):
    """``draw(logprobs, keys, positions)``: row i's token is the one it draws alone at position i."""
    gen = GenerationConfig(temperature=1.0)
    logprobs = mx.log(mx.softmax(mx.random.normal((4, 9000), key=mx.random.key(2)), axis=-1))
    keys = mx.array([sampling.row_key(1, 2, p, 0) for p in range(4)], dtype=mx.uint32)
    positions = mx.array([0, 5, 2, 9], dtype=mx.uint32)
    sampler = sampling.KeyedSampler(gen, [0], host=host)
    mixed = sampler.draw(logprobs, keys, positions).tolist()
    for i in range(4):
        alone = sampling.KeyedSampler(gen, [keys[i].item()], host=host)
        tokens = [alone(logprobs[i : i + 1]).item() for _ in range(positions[i].item() + 1)]
        assert mixed[i] == tokens[-1]
    # one key at eight positions: eight independent draws, not one token repeated
    same_key = sampler.draw(mx.repeat(logprobs[:1], 8, axis=0), mx.repeat(keys[:1], 8), mx.arange(8, dtype=mx.uint32))
    assert len(set(same_key.tolist())) > 1


def test_the_host_draw_reports_the_tokens_log_probs_at_temperature_one():
    gen = GenerationConfig(temperature=0.7, top_k=20)
    logits = mx.random.normal((5, 9000), key=mx.random.key(4)) * 3
    tokens, picked = sampling.KeyedSampler(gen, list(range(5)), host=True).sample_logits(logits, True)
    want = mx.take_along_axis(logits - mx.logsumexp(logits, axis=-1, keepdims=True), tokens[:, None].astype(mx.int32), -1)
    np.testing.assert_allclose(np.array(picked), np.array(want)[:, 0], atol=1e-5)


@pytest.mark.parametrize("gen", [GenerationConfig(), GenerationConfig(temperature=0.8, top_p=0.9, min_p=0.01, top_k=30)],
                         ids=["plain", "filters"])
def test_column_major_logits_draw_what_row_major_ones_do(gen):
    """A decode step's flipped head product is column-major; the host draw reads it in place."""
    columns = mx.transpose(mx.random.normal((9000, 6), key=mx.random.key(6)) * 3)
    rows = mx.contiguous(columns)
    assert not np.array(columns, copy=False).flags.c_contiguous and np.array(rows, copy=False).flags.c_contiguous
    keys = [sampling.row_key(2, 7, p, 0) for p in range(6)]
    a, lp_a = sampling.KeyedSampler(gen, keys, host=True).sample_logits(columns, True)
    b, lp_b = sampling.KeyedSampler(gen, keys, host=True).sample_logits(rows, True)
    assert a.tolist() == b.tolist()
    np.testing.assert_allclose(np.array(lp_a), np.array(lp_b), atol=1e-6)
