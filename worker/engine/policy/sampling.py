"""Rank-independent sampling: every completion draws from its own counter-based random stream.

A per-process random stream (``mx.random``) makes a completion's tokens depend on which rows share
its batch, so a 2-rank run (each rank sampling half the prompts) would generate different tokens from
a 1-rank run with the same seed. Here each row's randomness is a pure function of
``(seed, step, prompt position in the step's global batch, completion index, token position)``
(``row_key`` gives the first four, the sampler counts the position), so a resumed step also
replays exactly. Two draws, both the law of ``mx.random.categorical`` on the filtered, tempered
logits; the plan's ``host_sampling`` picks one (the same key draws different tokens in each):

- on the CPU, ``accel.host_sampling``: one uniform per (row, position) from a splitmix64 hash and
  an inverse-CDF draw in numpy (MLX's x86 ``exp``/``log`` are a libm call per element);
- elsewhere (Metal, CUDA), MLX's own ops: a murmur3-style hash per (row, position, vocabulary
  index), turned into Gumbel noise, and ``argmax(logits / temperature + gumbel)`` (Gumbel-max).

The filters (top-p, min-p, top-k) are mlx-lm's, applied before the draw as mlx-lm's sampler does.
The sampler is stateful: each call draws the next token position (``fastgen`` calls it once per
position, in order); ``rollout`` builds a fresh one per rollout. ``draw`` takes one position per
row instead.
"""

from __future__ import annotations

from typing import Callable

import mlx.core as mx
import numpy as np
from mlx_lm.sample_utils import apply_min_p, apply_top_k, apply_top_p

from grpo_tui.protocol.config import GenerationConfig
from grpo_tui.worker.engine.accel import host_sampling
from grpo_tui.worker.engine.accel.temperature import inverse

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


def host_uniforms(keys: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """One float64 uniform strictly inside (0, 1) per row, from its key and position (splitmix64)."""
    x = (keys.astype(np.uint64) << np.uint64(32)) | (positions.astype(np.uint64) & np.uint64(0xFFFFFFFF))
    x = x + np.uint64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    x = x ^ (x >> np.uint64(31))
    return ((x >> np.uint64(11)).astype(np.float64) + 0.5) * 2.0**-53  # 53 bits: never 0 or 1


class KeyedSampler:
    """mlx-lm's sampler chain with a keyed draw: ``sampler(logprobs)`` samples the next position of
    every row. ``keys``: one ``row_key`` per row, in the rollout's row order. ``host``: the plan's
    ``host_sampling`` (the numpy draw); without it MLX's own ops draw."""

    def __init__(self, gen: GenerationConfig, keys: list[int], *, host: bool = False) -> None:
        self.temperature = gen.temperature
        self.keys = mx.array(keys, dtype=mx.uint32)
        self.position = 0
        self.on_host = host
        self.host_filters = host_sampling.Filters(gen.top_p, gen.min_p, gen.top_k)
        self.filters: list[Callable[[mx.array], mx.array]] = []
        if 0.0 < gen.top_p < 1.0:
            self.filters.append(lambda x: apply_top_p(x, gen.top_p))
        if gen.min_p != 0.0:
            self.filters.append(lambda x: apply_min_p(x, gen.min_p, 1))
        if gen.top_k > 0:
            self.filters.append(lambda x: apply_top_k(x, gen.top_k))

    def _next_positions(self) -> mx.array:
        positions = mx.full(self.keys.shape, self.position, dtype=mx.uint32)
        self.position += 1
        return positions

    def __call__(self, logprobs: mx.array) -> mx.array:
        return self.draw(logprobs, self.keys, self._next_positions())

    def draw(self, logprobs: mx.array, keys: mx.array, positions: mx.array) -> mx.array:
        """One token per row of ``logprobs`` (rows, vocabulary; any constant shift per row on the
        host), row i drawn with ``keys[i]`` at token position ``positions[i]`` (both (rows,))."""
        if self.on_host:
            return self.sample_logits(logprobs, False, keys, positions)[0]
        for method in self.filters:
            logprobs = method(logprobs)
        return _draw(logprobs, keys.astype(mx.uint32), positions.astype(mx.uint32), inverse(self.temperature))

    def sample_logits(self, logits: mx.array, logprobs: bool, keys: mx.array | None = None,
                      positions: mx.array | None = None) -> tuple[mx.array, mx.array | None]:
        """The host draw (``host`` only) from raw ``logits``: the tokens and, with ``logprobs``, their
        log-probs under softmax(logits) (temperature 1, unfiltered: what ``fastgen`` reports)."""
        if keys is None or positions is None:
            keys, positions = self.keys, self._next_positions()
        u = host_uniforms(np.array(keys), np.array(positions))
        tokens, picked = host_sampling.draw(logits, u, self.temperature, self.host_filters, logprobs)
        return mx.array(tokens.astype(np.uint32)), None if picked is None else mx.array(picked)


def step_keys(seed: int, step: int, prompt_positions: list[int], n: int) -> list[int]:
    """Row keys of a rollout of ``n`` completions per prompt, row ``i * n + j``; ``prompt_positions``
    are the prompts' positions in the step's global batch (the same on every rank)."""
    return [row_key(seed, step, p, j) for p in prompt_positions for j in range(n)]
