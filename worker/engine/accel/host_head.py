"""The LM head and the vocabulary log-softmax together in numpy, a block of vocabulary at a time.

``accel.host_vocab`` takes the logits from MLX: a micro-batch's (positions, vocabulary) float32
logits and their gradient then exist whole in MLX memory, several times over in the differentiated
graph (1.24 GB per copy on the real-vocab-tiny bench step: 2,048 positions × 151,936). Here one
custom function takes the final hidden states and the head's weight instead and returns the
targets' log-probs and the entropy. It projects ``BLOCK`` vocabulary entries at a time for every
position (numpy's matmul into a kept buffer), so only a block of logits ever exists:

- forward: per block its logits' max, sum of exp and exp-weighted sum of logits per position,
  combined at the end into the log-sum-exp and the entropy (the online log-softmax); the targets'
  logits are read off the block that holds them;
- gradient: recomputes each block's logits and, from the forward's log-sum-exp, its softmax; the
  block's rows of the weight's gradient are written once, straight into the MLX array returned,
  and the hidden states' gradient is a (positions, hidden) running sum.

The price is the head's matmul once more in the gradient; the block of logits stays in cache for
the passes over it, where the whole logits tensor went through memory in every pass.

Only for eager graphs and small models: the forward evaluates the hidden states mid-graph (see
``plan``). The entropy has a gradient only for the entropy bonus (``entropy_grad``: the block's
log-softmax kept beside its softmax). Used wherever the plan's ``host_vocab``
runs on a plain (unquantized, bias-free) head (``chunked_head.plain_weight``).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Callable

import mlx.core as mx
import numpy as np

from grpo_tui.worker.engine.accel.host_vocab import by_halves, host, scratch
from grpo_tui.worker.engine.accel.temperature import inverse

BLOCK = 2048  # vocabulary entries per block: (positions × BLOCK) float32 logits at a time


def _blocks(vocabulary: int) -> list[slice]:
    return [slice(s, min(s + BLOCK, vocabulary)) for s in range(0, vocabulary, BLOCK)]


def _block_logits(h: np.ndarray, w: np.ndarray, block: slice) -> np.ndarray:
    """(positions, block) ``h @ w[block].T``, in the kept buffer."""
    return np.matmul(h, w[block].T, out=scratch((len(h), block.stop - block.start), "head-logits"))


def _targets_in(targets: np.ndarray, block: slice) -> tuple[np.ndarray, np.ndarray]:
    """(positions whose target is in ``block``, the target's column in the block)."""
    rows = np.flatnonzero((targets >= block.start) & (targets < block.stop))
    return rows, targets[rows] - block.start


def _block_stats(x: np.ndarray, e: np.ndarray, top: np.ndarray, total: np.ndarray, weighted: np.ndarray) -> None:
    """Per row of ``x``: its max, the sum of exp(x - max) and of exp(x - max) · x (``e``: a buffer).
    float32 sums within a block (numpy's pairwise sum), float64 across blocks."""
    top[:] = x.max(axis=1)
    np.exp(np.subtract(x, top[:, None], out=e), out=e)
    total[:] = e.sum(axis=1)
    weighted[:] = np.einsum("ij,ij->i", e, x)


def forward(h: np.ndarray, w: np.ndarray, targets: np.ndarray, inv_temp: float) -> tuple[np.ndarray, ...]:
    """(log-probs of ``targets``, entropy, log-sum-exp, 1 where the target is the most likely token),
    float32 per position, of ``h @ w.T * inv_temp``."""
    h = h * np.float32(inv_temp)  # the temperature on the small side of the product
    blocks = _blocks(len(w))
    top, total, weighted = (np.empty((len(blocks), len(h)), np.float32) for _ in range(3))
    picked = np.empty(len(h), np.float32)
    for i, block in enumerate(blocks):
        x = _block_logits(h, w, block)
        by_halves(_block_stats, x, scratch(x.shape, "head-exp"), top[i], total[i], weighted[i])
        rows, columns = _targets_in(targets, block)
        picked[rows] = x[rows, columns]
    # The online log-softmax: each block's sums rescaled to the overall max.
    best = top.max(axis=0)
    scale = np.exp(top - best[None, :]).astype(np.float64)
    mass = (total * scale).sum(axis=0)
    lse = best + np.log(mass)
    entropy = lse - (weighted * scale).sum(axis=0) / mass
    is_top = (picked >= best).astype(np.float32)  # the same float32 logits: an exact comparison
    return (picked - lse).astype(np.float32), entropy.astype(np.float32), lse.astype(np.float32), is_top


def gradient(h: np.ndarray, w: np.ndarray, targets: np.ndarray, lse: np.ndarray, cotangent: np.ndarray,
             inv_temp: float, d_weight: np.ndarray | None,
             entropy: tuple[np.ndarray, np.ndarray] | None = None) -> np.ndarray:
    """d(cotangent · log-probs) / d h, and into ``d_weight`` (when given) d / d w, block by block.

    With c = cotangent / temperature and p the softmax: d logits = c · (onehot(target) - p), so
    d h = c · (w[target] - p @ w) and d w = onehot^T (c · h) - p^T (c · h). The log-sum-exp is a
    column of the product ([h / T, -lse] @ [w, 1].T = logits - lse), and c sits on h's side, so a
    block costs its matmuls and one ``exp`` pass. ``entropy``: (the entropy H, its cotangent e), the
    entropy bonus's part added: d logits -= e · q with q = p · (log p + H)."""
    width = h.shape[1]
    shifted = np.concatenate([h * np.float32(inv_temp), -lse[:, None]], axis=1)
    ones = scratch((len(w), width + 1), "head-weight")
    ones[:, :width], ones[:, width] = w, 1.0
    scaled = (cotangent * inv_temp).astype(np.float32)
    weighted = h * -scaled[:, None]  # -c · h: p^T of it is the softmax's part of d w
    expected = np.zeros(h.shape, np.float32)  # p @ w, summed over the blocks
    if entropy is not None:
        bonus_scaled = (entropy[1] * inv_temp).astype(np.float32)
        bonus_weighted = h * -bonus_scaled[:, None]
        bonus_expected = np.zeros(h.shape, np.float32)  # q @ w, summed over the blocks
    for block in _blocks(len(w)):
        p = _block_logits(shifted, ones, block)
        log_p = p.copy() if entropy is not None else None
        by_halves(lambda x: np.exp(x, out=x), p)
        expected += p @ w[block]
        if d_weight is not None:
            np.matmul(p.T, weighted, out=d_weight[block])
        if entropy is not None and log_p is not None:
            q = p * (log_p + entropy[0][:, None])
            bonus_expected += q @ w[block]
            if d_weight is not None:
                d_weight[block] += q.T @ bonus_weighted
    if d_weight is not None:
        np.add.at(d_weight, targets, -weighted)  # the onehot part: + c · h at each target's row
    d_h = scaled[:, None] * (w[targets] - expected)
    if entropy is not None:
        d_h -= bonus_scaled[:, None] * bonus_expected
    return d_h


def _float32(array: mx.array) -> np.ndarray:
    """``array`` as float32 numpy, a view of MLX's memory when it is float32 already (no copy of
    the head's weight)."""
    return host(array if array.dtype == mx.float32 else array.astype(mx.float32))


@lru_cache(maxsize=None)
def _function(temperature: float, weight_grad: bool, entropy_grad: bool = False) -> Callable:
    """The custom function for one setting (a custom function is built once per setting)."""
    inv_temp = inverse(temperature)

    @mx.custom_function
    def logps_entropy(hidden: mx.array, weight: mx.array, targets: mx.array) -> tuple[mx.array, ...]:
        h, w = _float32(hidden), _float32(weight)
        return tuple(mx.array(a) for a in forward(h, w, host(targets), inv_temp))

    @logps_entropy.vjp
    def _vjp(primals, cotangents, outputs):
        hidden, weight, targets = primals
        h, w = _float32(hidden), _float32(weight)
        d_weight = mx.zeros(weight.shape, mx.float32)
        out = host(d_weight) if weight_grad else None  # writable: MLX's buffer, filled in place
        # The log-sum-exp and the top flags are metrics; so is the entropy but for the entropy bonus.
        bonus = (host(outputs[1]), _float32(cotangents[1])) if entropy_grad else None
        d_hidden = gradient(h, w, host(targets), host(outputs[2]), _float32(cotangents[0]),
                            inv_temp, out, bonus)
        if weight.dtype != mx.float32:
            d_weight = d_weight.astype(weight.dtype)
        return mx.array(d_hidden).astype(hidden.dtype), d_weight, mx.zeros_like(targets)

    return logps_entropy


def logps_entropy(hidden: mx.array, weight: mx.array, targets: mx.array, temperature: float,
                  weight_grad: bool, entropy_grad: bool = False) -> tuple[mx.array, mx.array, mx.array]:
    """(log-probs of ``targets``, entropy, 1 where the target is the most likely token), (B, T) each,
    of ``hidden`` (B, T, H) through the head ``weight`` (V, H) on logits / temperature.
    ``weight_grad``: the head is trained (LoRA's is not); ``entropy_grad``: the entropy is differentiated.
    """
    rows, steps, width = hidden.shape
    logps, entropy, _, is_top = _function(float(temperature), weight_grad, entropy_grad)(
        hidden.reshape(rows * steps, width), weight, targets.reshape(-1))
    entropy = entropy if entropy_grad else mx.stop_gradient(entropy)
    return (logps.reshape(rows, steps), entropy.reshape(rows, steps),
            mx.stop_gradient(is_top).reshape(rows, steps))
