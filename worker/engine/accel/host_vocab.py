"""Target log-probs and entropy over a large vocabulary, computed with numpy on the host.

Per completion token a GRPO step needs log softmax(logits)[target] (and its gradient) and the
entropy, over every vocabulary entry. MLX's CPU ``exp`` is a libm ``fma`` call per element on the
x86 wheels, while numpy's is SIMD, so the same maths runs in numpy, at any size: the positions go
through in chunks of ``CHUNK_BYTES`` of logits (``chunk_rows``), each chunk's halves on two threads,
so the host buffer is bounded whatever the step size. The forward reads the evaluated logits in
place (a view of MLX's memory) and the gradient is written straight into the MLX array it returns,
so neither makes a step-sized numpy copy.

Only for eager (uncompiled) graphs: the forward evaluates the logits and the gradient evaluates its
cotangent, both synchronously. The entropy has a gradient in ``logps_entropy_grad`` alone (the
entropy bonus); elsewhere it is a metric. Whether a model gets
this is the plan's ``host_vocab`` (``GRPO_TUI_HOST_VOCAB=0`` turns it off).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

import mlx.core as mx
import numpy as np

MIN_VOCABULARY = 8192  # below this MLX's own fused kernels are cheap enough, and stay lazy
# The host buffer: the softmax of this many bytes of float32 logits at a time (~220 positions of a
# 151,936 vocabulary), kept for the process. One buffer of a fixed size also keeps the heap whole:
# fresh step-sized numpy buffers left holes that MLX's next large arrays did not fit, so they were
# page-faulted in again.
CHUNK_BYTES = 128 * 2**20

_POOL = ThreadPoolExecutor(max_workers=2, thread_name_prefix="host-vocab")  # numpy ufuncs release the GIL
_SCRATCH: dict[str, np.ndarray] = {}


def scratch(shape: tuple[int, int], name: str = "log-softmax") -> np.ndarray:
    """A float32 (rows, columns) view of buffer ``name``, kept for the process and grown when needed."""
    size = shape[0] * shape[1]
    if name not in _SCRATCH or _SCRATCH[name].size < size:
        _SCRATCH[name] = np.empty(size, np.float32)
    return _SCRATCH[name][:size].reshape(shape)


def chunk_rows(vocabulary: int) -> int:
    """Positions per chunk of the host log-softmax."""
    return max(1, CHUNK_BYTES // (4 * vocabulary))


def fits(logits: mx.array) -> bool:
    """Whether these logits may go to numpy (float32: any size, chunk by chunk)."""
    return logits.dtype == mx.float32


def _probabilities(x: np.ndarray, out: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(softmax of each row, log-sum-exp of each row, max of each row) for float32 rows ``x``,
    softmax into ``out``."""
    top = x.max(axis=1)
    probs = np.subtract(x, top[:, None], out=out)
    np.exp(probs, out=probs)
    total = probs.sum(axis=1, dtype=np.float64)
    probs /= total.astype(np.float32)[:, None]
    return probs, top + np.log(total).astype(np.float32), top


def _forward_rows(x: np.ndarray, targets: np.ndarray, buffer: np.ndarray, picked: np.ndarray,
                  entropy: np.ndarray, is_top: np.ndarray) -> None:
    probs, lse, top = _probabilities(x, buffer)
    target = x[np.arange(len(x)), targets]
    picked[:] = target - lse
    entropy[:] = lse - np.einsum("ij,ij->i", probs, x)
    is_top[:] = target >= top


def _gradient_rows(x: np.ndarray, targets: np.ndarray, cotangent: np.ndarray, out: np.ndarray) -> None:
    probs, _, _ = _probabilities(x, out)
    probs *= -cotangent[:, None]  # d logp[target] / dx = onehot(target) - softmax(x)
    probs[np.arange(len(x)), targets] += cotangent


def _bonus_gradient_rows(x: np.ndarray, targets: np.ndarray, cotangent: np.ndarray, entropy_cotangent: np.ndarray,
                         out: np.ndarray) -> None:
    """``_gradient_rows`` plus the entropy's part: d H / dx = -softmax(x) · (log softmax(x) + H)."""
    probs, lse, _ = _probabilities(x, out)
    entropy = lse - np.einsum("ij,ij->i", probs, x)
    weight = np.subtract(x, (lse - entropy)[:, None])  # log softmax + H
    weight *= entropy_cotangent[:, None]
    weight += cotangent[:, None]
    probs *= weight
    np.negative(probs, out=probs)
    probs[np.arange(len(x)), targets] += cotangent


def by_halves(fn: Callable[..., Any], *rows: np.ndarray) -> list:
    """``fn`` on each half of the rows (every argument is sliced), the halves on two threads."""
    cut = len(rows[0]) // 2
    if cut == 0:
        return [fn(*rows)]
    return list(_POOL.map(lambda part: fn(*(r[part] for r in rows)), (slice(0, cut), slice(cut, None))))


def host(array: mx.array) -> np.ndarray:
    """``array`` evaluated, as a numpy view of its memory (no copy)."""
    mx.eval(array)
    return np.array(array, copy=False)


def _chunks(rows: int, vocabulary: int) -> list[slice]:
    step = chunk_rows(vocabulary)
    return [slice(s, min(s + step, rows)) for s in range(0, rows, step)]


def rows_forward(logits: mx.array, targets: mx.array) -> tuple[mx.array, mx.array, mx.array]:
    """(log softmax(logits)[target], entropy, 1 where the target is the row's max) per row of float32
    ``logits`` (N, V), evaluated now (the host log-softmax's forward)."""
    x, t = host(logits), host(targets)
    picked, entropy, is_top = (np.empty(len(x), np.float32) for _ in range(3))
    for rows in _chunks(*x.shape):
        buffer = scratch((rows.stop - rows.start, x.shape[1]))
        by_halves(_forward_rows, x[rows], t[rows], buffer, picked[rows], entropy[rows], is_top[rows])
    return mx.array(picked), mx.array(entropy), mx.array(is_top)


def rows_gradient(logits: mx.array, targets: mx.array, cotangent: mx.array,
                  entropy_cotangent: mx.array | None = None) -> mx.array:
    """d(cotangent · log softmax(logits)[target] [+ entropy_cotangent · entropy]) / d logits,
    evaluated now: computed chunk by chunk into the (N, V) MLX array it returns (a fresh one per call)."""
    x, t, c = host(logits), host(targets), host(cotangent.astype(mx.float32))
    gradient = mx.zeros(x.shape, mx.float32)
    out = host(gradient)  # writable: MLX's buffer, filled in place
    if entropy_cotangent is not None:
        e = host(entropy_cotangent.astype(mx.float32))
        for rows in _chunks(*x.shape):
            by_halves(_bonus_gradient_rows, x[rows], t[rows], c[rows], e[rows], out[rows])
        return gradient
    for rows in _chunks(*x.shape):
        by_halves(_gradient_rows, x[rows], t[rows], c[rows], out[rows])
    return gradient


@mx.custom_function
def logps_entropy(logits: mx.array, targets: mx.array) -> tuple[mx.array, mx.array, mx.array]:
    """(log softmax(logits)[target], entropy, 1 where the target is the most likely token) per row of
    float32 ``logits`` (N, V), ``targets`` (N,)."""
    return rows_forward(logits, targets)


@logps_entropy.vjp
def _logps_entropy_vjp(primals, cotangents, outputs):
    logits, targets = primals
    return rows_gradient(logits, targets, cotangents[0]), mx.zeros_like(targets)


@mx.custom_function
def logps_entropy_grad(logits: mx.array, targets: mx.array) -> tuple[mx.array, mx.array, mx.array]:
    """``logps_entropy`` whose entropy is differentiated too (the entropy bonus)."""
    return rows_forward(logits, targets)


@logps_entropy_grad.vjp
def _logps_entropy_grad_vjp(primals, cotangents, outputs):
    logits, targets = primals
    return rows_gradient(logits, targets, cotangents[0], cotangents[1]), mx.zeros_like(targets)
