"""Target log-probs and entropy over a large vocabulary, computed with numpy on the host.

Per completion token a GRPO step needs log softmax(logits)[target] (and its gradient) and the
entropy, over every vocabulary entry. MLX's CPU ``exp`` is a libm ``fma`` call per element on the
x86 wheels, while numpy's is SIMD, so the same maths runs in numpy, in a buffer kept between steps.

Only for eager (uncompiled) graphs: the forward evaluates the logits and the gradient evaluates its
cotangent, both synchronously. The entropy is a metric and has no gradient. Whether a model gets
this is the plan's ``host_vocab`` (``GRPO_TUI_HOST_VOCAB=0`` turns it off).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import mlx.core as mx
import numpy as np

MIN_VOCABULARY = 8192  # below this MLX's own fused kernels are cheap enough, and stay lazy
# Evaluating the logits mid-graph keeps ~4 of the differentiated graph's logit-sized arrays alive
# at once; above this many logits per micro-batch MLX's own kernels run instead.
MAX_LOGITS = 64 * 2**20

_POOL = ThreadPoolExecutor(max_workers=2, thread_name_prefix="host-vocab")  # numpy ufuncs release the GIL
_SCRATCH: list[np.ndarray] = [np.empty(0, np.float32)]


def _scratch(shape: tuple[int, int]) -> np.ndarray:
    """One float32 buffer kept for the process, grown when needed: fresh numpy buffers each step
    left holes in the heap (malloc keeps freed memory, ``memory``) that MLX's next large arrays
    did not fit, so they were page-faulted in again."""
    size = shape[0] * shape[1]
    if _SCRATCH[0].size < size:
        _SCRATCH[0] = np.empty(size, np.float32)
    return _SCRATCH[0][:size].reshape(shape)


def fits(logits: mx.array) -> bool:
    """Whether these logits may go to numpy: float32 and at most ``MAX_LOGITS`` of them."""
    return logits.dtype == mx.float32 and logits.size <= MAX_LOGITS


def _probabilities(x: np.ndarray, out: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(softmax of each row, log-sum-exp of each row) for float32 rows ``x``, softmax into ``out``."""
    top = x.max(axis=1)
    probs = np.subtract(x, top[:, None], out=out)
    np.exp(probs, out=probs)
    total = probs.sum(axis=1, dtype=np.float64)
    probs /= total.astype(np.float32)[:, None]
    return probs, top + np.log(total).astype(np.float32)


def _forward_rows(x: np.ndarray, targets: np.ndarray, out: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    probs, lse = _probabilities(x, out)
    picked = x[np.arange(len(x)), targets] - lse
    entropy = lse - np.einsum("ij,ij->i", probs, x)
    return picked, entropy


def _gradient_rows(x: np.ndarray, targets: np.ndarray, cotangent: np.ndarray, out: np.ndarray) -> None:
    probs, _ = _probabilities(x, out)
    probs *= -cotangent[:, None]  # d logp[target] / dx = onehot(target) - softmax(x)
    probs[np.arange(len(x)), targets] += cotangent


def _by_halves(fn, *rows: np.ndarray) -> list:
    """``fn`` on each half of the rows (every argument is sliced), the halves on two threads."""
    cut = len(rows[0]) // 2
    if cut == 0:
        return [fn(*rows)]
    return list(_POOL.map(lambda part: fn(*(r[part] for r in rows)), (slice(0, cut), slice(cut, None))))


def _host(array: mx.array) -> np.ndarray:
    mx.eval(array)
    return np.array(array, copy=False)


def rows_forward(logits: mx.array, targets: mx.array) -> tuple[mx.array, mx.array]:
    """(log softmax(logits)[target], entropy) per row of float32 ``logits`` (N, V), evaluated now
    (also ``engine.chunked_head``'s per-chunk log-softmax)."""
    x = _host(logits)
    parts = _by_halves(_forward_rows, x, _host(targets), _scratch(x.shape))
    return mx.array(np.concatenate([p for p, _ in parts])), mx.array(np.concatenate([e for _, e in parts]))


def rows_gradient(logits: mx.array, targets: mx.array, cotangent: mx.array) -> mx.array:
    """d(cotangent · log softmax(logits)[target]) / d logits, evaluated now."""
    x = _host(logits)
    gradient = _scratch(x.shape)
    _by_halves(_gradient_rows, x, _host(targets), _host(cotangent.astype(mx.float32)), gradient)
    return mx.array(gradient)  # mx.array copies: the buffer is free again


@mx.custom_function
def logps_entropy(logits: mx.array, targets: mx.array) -> tuple[mx.array, mx.array]:
    """(log softmax(logits)[target], entropy) per row of float32 ``logits`` (N, V), ``targets`` (N,)."""
    return rows_forward(logits, targets)


@logps_entropy.vjp
def _logps_entropy_vjp(primals, cotangents, outputs):
    logits, targets = primals
    return rows_gradient(logits, targets, cotangents[0]), mx.zeros_like(targets)
