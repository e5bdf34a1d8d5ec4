"""Rank-independent sampling: every completion draws from its own counter-based random stream.

A per-process random stream (``mx.random``) makes a completion's tokens depend on which rows share
its batch, so a 2-rank run (each rank sampling half the prompts) would generate different tokens from
a 1-rank run with the same seed. Here each row's noise is a pure function of
``(seed, step, prompt position in the step's global batch, completion index, token position,
vocabulary index)``: a murmur3-style integer hash, vectorised over rows and the vocabulary, turned
into Gumbel noise; the token is ``argmax(logits / temperature + gumbel)`` (the Gumbel-max trick, the
same law as ``mx.random.categorical``). The same hash also makes a resumed step replay exactly.

The filters (top-p, min-p, top-k) are mlx-lm's own, applied before the draw as mlx-lm's sampler does.
The sampler is stateful: each call draws the next token position (``fastgen`` calls it once per
position, in order); ``rollout`` builds a fresh one per rollout.
"""

from __future__ import annotations

from typing import Callable

import mlx.core as mx
from mlx_lm.sample_utils import apply_min_p, apply_top_k, apply_top_p

from grpo_tui.protocol.config import GenerationConfig

_MASK64 = (1 << 64) - 1


def _splitmix64(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


def row_key(seed: int, step: int, prompt: int, completion: int) -> int:
    """A 32-bit key for one completion, from the step's coordinates only (no process state)."""
    x = 0
    for part in (seed, step, prompt, completion):
        x = _splitmix64(x ^ (part & _MASK64))
    return x & 0xFFFFFFFF


def _fmix32(h: mx.array) -> mx.array:
    """murmur3's 32-bit finaliser: a bijection that mixes every input bit into every output bit."""
    h = h ^ (h >> 16)
    h = h * mx.array(0x85EBCA6B, dtype=mx.uint32)
    h = h ^ (h >> 13)
    h = h * mx.array(0xC2B2AE35, dtype=mx.uint32)
    return h ^ (h >> 16)


def uniform(keys: mx.array, position: mx.array, vocab: int) -> mx.array:
    """(rows, vocab) uniforms in (0, 1), a function of (row key, position, vocabulary index)."""
    golden = mx.array(0x9E3779B9, dtype=mx.uint32)
    per_row = _fmix32(keys ^ _fmix32(position.astype(mx.uint32) * golden + golden))
    index = mx.arange(vocab, dtype=mx.uint32) * mx.array(0xCC9E2D51, dtype=mx.uint32)
    bits = _fmix32(_fmix32(per_row[:, None] ^ index[None, :]) + golden)
    return unit_interval(bits)


def unit_interval(bits: mx.array) -> mx.array:
    """uint32 -> float32 strictly inside (0, 1). 23 bits, not 24: (2**24 - 1) + 0.5 rounds to 2**24 in
    float32, so u = 1 and its Gumbel noise is +inf, about once per token of a 150k vocabulary."""
    return ((bits >> 9).astype(mx.float32) + 0.5) * (1.0 / (1 << 23))


def _gumbel_max(logits: mx.array, keys: mx.array, position: mx.array, inv_temp: float) -> mx.array:
    u = uniform(keys, position, logits.shape[-1])
    return mx.argmax(logits * inv_temp - mx.log(-mx.log(u)), axis=-1).astype(mx.uint32)


_draw = mx.compile(_gumbel_max)


class KeyedSampler:
    """mlx-lm's sampler chain with a keyed draw: ``sampler(logprobs)`` samples the next position of
    every row. ``keys``: one ``row_key`` per row, in the rollout's row order."""

    def __init__(self, gen: GenerationConfig, keys: list[int]) -> None:
        self.temperature = gen.temperature
        self.keys = mx.array(keys, dtype=mx.uint32)
        self.position = 0
        self.filters: list[Callable[[mx.array], mx.array]] = []
        if 0.0 < gen.top_p < 1.0:
            self.filters.append(lambda x: apply_top_p(x, gen.top_p))
        if gen.min_p != 0.0:
            self.filters.append(lambda x: apply_min_p(x, gen.min_p, 1))
        if gen.top_k > 0:
            self.filters.append(lambda x: apply_top_k(x, gen.top_k))

    def __call__(self, logprobs: mx.array) -> mx.array:
        position = mx.array(self.position, dtype=mx.uint32)
        self.position += 1
        return self.draw(logprobs, self.keys, position)

    def draw(self, logprobs: mx.array, keys: mx.array, positions: mx.array) -> mx.array:
        """One token per row of ``logprobs``: row i's is a pure function of ``keys[i]``,
        ``positions[i]`` (its token position; a scalar: the same for every row) and
        ``logprobs[i]``, so rows at different positions (agent rollouts) draw in one call."""
        for method in self.filters:
            logprobs = method(logprobs)
        return _draw(logprobs, keys, positions, 1.0 / self.temperature)


def step_keys(seed: int, step: int, prompt_positions: list[int], n: int) -> list[int]:
    """Row keys of a rollout of ``n`` completions per prompt, row ``i * n + j``; ``prompt_positions``
    are the prompts' positions in the step's global batch (the same on every rank)."""
    return [row_key(seed, step, p, j) for p in prompt_positions for j in range(n)]
