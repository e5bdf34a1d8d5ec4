"""Sampling over a large vocabulary in numpy: one uniform per row, an inverse-CDF draw.

MLX's x86 CPU ``exp`` and ``log`` are a libm call per element (~20 ns), so a Gumbel-max draw over
64 rows × 151,936 logits (a hash and two logs per element) cost ~210 ms per token, more than a
small model's decode step. Here each row takes one uniform ``u`` (``engine.sampling`` derives it
from the row's key and position) and the token is the first index whose cumulative weight exceeds
``u`` times the total: the weights are ``exp((logit - max) / temperature)`` in numpy (SIMD, ~1 ns
per element) over the tokens the filters keep, summed per block of ``BLOCK`` entries, the blocks'
and then one block's cumulative sums in float64. That is the law of ``mx.random.categorical`` on
the same filtered, tempered logits (tested by chi-square against mlx-lm's sampler).

The filters are mlx-lm's, as ``make_sampler`` chains them (top-p, then min-p, then top-k, all on
the untempered log-probs, temperature applied after): each keeps the tokens at or above a value,
so together they keep ``logit >= max(thresholds)``; a tie at top-k's k-th value keeps the tied
tokens of lowest index, so exactly k remain (mlx-lm's ``argpartition`` keeps an unspecified k).

Rows are independent (a row's token depends on its logits and its ``u`` only); row-major logits
run as two halves on two threads (numpy releases the GIL). Whether rollouts sample here is the
plan's ``host_sampling``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import mlx.core as mx
import numpy as np

from grpo_tui.worker.engine.accel.host_vocab import by_halves, host, scratch
from grpo_tui.worker.engine.accel.temperature import inverse

BLOCK = 256  # entries per partial sum: one block's cumulative sum locates the token


@dataclass(frozen=True)
class Filters:
    """mlx-lm's sampling filters (``generation`` config); the defaults filter nothing."""

    top_p: float = 1.0
    min_p: float = 0.0
    top_k: int = 0

    @property
    def any(self) -> bool:
        return self.top_p < 1.0 or self.min_p > 0.0 or self.top_k > 0


def draw(logits: mx.array, uniforms: np.ndarray, temperature: float, filters: Filters = Filters(),
         logprobs: bool = False) -> tuple[np.ndarray, np.ndarray | None]:
    """(token per row, and with ``logprobs`` its log-prob under softmax(logits) at temperature 1,
    unfiltered) for (rows, vocabulary) ``logits`` (any shift) and one uniform in (0, 1) per row."""
    x = host(logits.astype(mx.float32))
    rows = x.shape[0]
    tokens = np.empty(rows, np.int64)
    picked = np.empty(rows, np.float32) if logprobs else None
    # The weights take the logits' layout: a decode step's head product is column-major when
    # ``patches`` flips it, and every pass here is elementwise or a reduction numpy runs in memory
    # order (a copy to row-major would cost twice an exp pass).
    if x.flags.c_contiguous:
        weights = scratch(x.shape, "sampling")
    else:
        x = np.asfortranarray(x)  # a no-op for the flipped head's output
        weights = scratch(x.shape[::-1], "sampling").T

    def part(x, u, e, tok, *lp):
        tok[:] = _draw_rows(x, u, e, inverse(temperature), filters, lp[0] if lp else None)

    args: list[np.ndarray] = [x, np.asarray(uniforms, np.float64), weights, tokens]
    if picked is not None:
        args.append(picked)
    if x.flags.c_contiguous:
        by_halves(part, *args)
    else:  # column-major halves of rows share every cache line: one thread reads them faster
        part(*args)
    return tokens, picked


def _draw_rows(x: np.ndarray, u: np.ndarray, e: np.ndarray, inv_temp: float, filters: Filters,
               picked: np.ndarray | None) -> np.ndarray:
    rows, vocab = x.shape
    top = x.max(axis=1)
    need_mass = filters.top_p < 1.0 or picked is not None  # top-p and the log-probs: at temperature 1
    mass = None
    if need_mass or inv_temp == 1.0:
        np.exp(np.subtract(x, top[:, None], out=e), out=e)
        if need_mass:
            mass = _block_sums(e).sum(axis=1)
    floor = _threshold(x, top, e, mass, filters)
    if inv_temp != 1.0:
        np.multiply(np.subtract(x, top[:, None], out=e), inv_temp, out=e)
        np.exp(e, out=e)
    if floor is not None:
        np.multiply(e, x >= floor[:, None], out=e)
        if 0 < filters.top_k < vocab:
            _keep_exactly(x, e, floor, filters.top_k)
    tokens = _inverse_cdf(e, u)
    if picked is not None and mass is not None:
        picked[:] = x[np.arange(rows), tokens] - (top + np.log(mass)).astype(np.float32)
    return tokens


def _block_sums(e: np.ndarray) -> np.ndarray:
    """(rows, blocks) float64 sums of consecutive ``BLOCK`` entries (the last block may be shorter;
    float32 within a block, ~1e-7 relative, ~1e-6 on column-major rows that numpy sums in order)."""
    rows, vocab = e.shape
    full = vocab // BLOCK * BLOCK
    sums = e[:, :full].reshape(rows, -1, BLOCK).sum(axis=2).astype(np.float64)
    if full < vocab:
        sums = np.concatenate([sums, e[:, full:].sum(axis=1, dtype=np.float64)[:, None]], axis=1)
    return sums


def _inverse_cdf(e: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Per row, the first index where the cumulative weight exceeds u · total (weights ``e`` >= 0)."""
    rows, vocab = e.shape
    sums = _block_sums(e)
    cum = np.cumsum(sums, axis=1)
    target = u * cum[:, -1]
    last = sums.shape[1] - 1 - np.argmax(sums[:, ::-1] > 0, axis=1)  # a rounded-up target stays on weight
    block = np.minimum(np.count_nonzero(cum <= target[:, None], axis=1), last)
    r = np.arange(rows)
    within = target - np.where(block > 0, cum[r, np.maximum(block - 1, 0)], 0.0)
    index = block[:, None] * BLOCK + np.arange(BLOCK)[None, :]
    segment = np.take_along_axis(e, np.minimum(index, vocab - 1), axis=1) * (index < vocab)
    step = np.count_nonzero(np.cumsum(segment, axis=1, dtype=np.float64) <= within[:, None], axis=1)
    positive = segment > 0  # a target rounded past the block's last weight takes that weight
    last_in_block = BLOCK - 1 - np.argmax(positive[:, ::-1], axis=1)
    step = np.where((step < BLOCK) & positive[r, np.minimum(step, BLOCK - 1)], step, last_in_block)
    return block * BLOCK + step


def _threshold(x: np.ndarray, top: np.ndarray, probs: np.ndarray, mass: np.ndarray | None,
               filters: Filters) -> np.ndarray | None:
    """Per row, the smallest logit the filters keep (None: no filter). ``probs``: exp(x - max)
    and ``mass`` its row sums, when top-p is on."""
    if not filters.any:
        return None
    rows, vocab = x.shape
    floor = np.full(rows, -np.inf, np.float32)
    if filters.min_p > 0.0:  # apply_min_p: drop logprobs < max + log(min_p)
        floor = top + np.float32(math.log(filters.min_p))
    k = filters.top_k if 0 < filters.top_k < vocab else 0
    if k or filters.top_p < 1.0:
        limit = None if filters.top_p >= 1.0 or mass is None else filters.top_p * mass
        # Only the tokens near the top are sorted: a window of logits that holds k tokens and
        # ``limit`` of mass holds both answers (tokens under min-p's floor are dropped anyway).
        # The first window is found for every row at once; rows it does not suffice widen it.
        near = x >= np.maximum(top - WINDOW, floor)[:, None]
        count = near.view(np.uint8).sum(axis=1, dtype=np.int64)
        enough = count >= k
        if limit is not None:
            enough &= probs.sum(axis=1, where=near) >= limit
        starts = np.concatenate([[0], np.cumsum(count)])
        values = x[near]  # row by row
        for r in range(rows):
            row_limit = None if limit is None else limit[r]
            candidates = values[starts[r]:starts[r + 1]] if enough[r] else _widen(x[r], top[r], floor[r], probs[r],
                                                                                   k, row_limit)
            floor[r] = max(floor[r], _rank_floor(candidates, top[r], k, row_limit))
    return floor


WINDOW = 8.0  # nats below the top: the first window of candidate tokens for top-k and top-p


def _widen(x: np.ndarray, top: float, floor: float, probs: np.ndarray, k: int, limit: float | None) -> np.ndarray:
    """One row's candidates in wider windows, until they hold k tokens and ``limit`` of mass."""
    for window in (2 * WINDOW, 4 * WINDOW, math.inf):
        near = x >= max(top - window, floor)
        enough = np.count_nonzero(near) >= k
        if window == math.inf or (enough and (limit is None or probs[near].sum(dtype=np.float64) >= limit)):
            break
    return x[near]


def _rank_floor(candidates: np.ndarray, top: float, k: int, limit: float | None) -> float:
    """One row's floor for top-k (the k-th largest logit) and top-p (apply_top_p: the tokens,
    largest first, whose mass strictly above them is below ``limit`` = top_p · total mass), from
    the row's largest logits ``candidates`` (all of them above any token either filter keeps)."""
    values = -np.sort(-candidates)  # largest first (ties in any order: they share one value)
    answer = -math.inf
    if k and len(values) >= k:
        answer = float(values[k - 1])
    if limit is not None:
        p = np.exp(values.astype(np.float64) - top)
        above = np.cumsum(p) - p
        answer = max(answer, float(values[max(int(np.count_nonzero(above < limit)), 1) - 1]))
    return answer


def _keep_exactly(x: np.ndarray, e: np.ndarray, floor: np.ndarray, k: int) -> None:
    """Where ties at the floor keep more than ``k`` tokens, drop the tied ones of highest index."""
    kept = np.count_nonzero(e, axis=1)
    for r in np.flatnonzero(kept > k):
        tied = np.flatnonzero((x[r] == floor[r]) & (e[r] > 0))
        e[r, tied[len(tied) - (kept[r] - k):]] = 0.0
