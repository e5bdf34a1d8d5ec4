"""Fast transcendental paths for MLX's CPU backend on x86-64.

MLX's CPU ``exp`` (and ``sigmoid``, ``sin``, ``cos``, ``tanh``, softmax, logsumexp) evaluate a
polynomial with ``fma``; the x86-64 Linux wheels are built without the FMA instruction set, so
each ``fma`` is a libm software call, far slower than a multiply-add (``bench/cpu_math.py``).
A GRPO step is full of them: the vocabulary log-softmax (150k logits per
token), SwiGLU in every MLP, the attention softmax, and RoPE's sin/cos.

This module computes them from multiplies and adds instead:
- ``fast_exp``: Cody-Waite range reduction to 2^i · 2^f, a degree-7 polynomial for 2^f, the 2^i
  built from the exponent bits; relative error ~3e-6 (MLX's own: ~3e-6). Its gradient is exp · g.
- ``logsumexp``, ``softmax``, ``swiglu`` and ``attention`` on top of it;
- RoPE from precomputed cos/sin tables (``rope``), the same rotation ``mx.fast.rope`` applies.

``patches.patch_model`` points a llama-family model's attention and MLP at these (same parameters,
same checkpoints). ``enabled()`` says whether this machine has the slow ``fma``: CPU on x86-64.
"""

from __future__ import annotations

import math
import platform
from typing import Any

import mlx.core as mx
import mlx.nn as nn
import numpy as np

_LOG2E = 1.4426950408889634
_ROUND = 12582912.0  # 1.5 * 2**23: adding it rounds a float32 of magnitude < 2**22 to an integer
_POLY = [math.log(2) ** k / math.factorial(k) for k in range(8)]  # 2^f = e^(f ln 2), Taylor


def enabled() -> bool:
    return mx.default_device() == mx.cpu and platform.machine().lower() in ("x86_64", "amd64")


def _exponent_bits(x: mx.array) -> mx.array:
    """The float32 bits of 2^round(x·log2 e): (round + 127) · 2^23, an exact float, as int32."""
    y = mx.clip(x, -87.0, 88.0) * _LOG2E
    rounded = (y + _ROUND) - _ROUND  # an integer in [-126, 127]
    return ((rounded + 127.0) * 8388608.0).astype(mx.int32)


def _scaled_polynomial(x: mx.array, power: mx.array) -> mx.array:
    y = mx.clip(x, -87.0, 88.0) * _LOG2E
    f = y - ((y + _ROUND) - _ROUND)  # in [-0.5, 0.5]
    p = _POLY[7]
    for c in reversed(_POLY[:7]):
        p = p * f + c
    return mx.where(x < -87.0, 0.0, p * power)


def _exp_kernel(x: mx.array) -> mx.array:
    return _scaled_polynomial(x, _exponent_bits(x).view(mx.float32))


# Not shapeless: a bit cast has no shapeless form. Two compiled halves around the one bit cast, each
# reading x: a single trace split at the cast into three kernels that kept x·log2 e, its rounding
# and the bits, five arrays of x's size at the peak instead of three, and ran 1.37x slower.
_exponent_bits_compiled = mx.compile(_exponent_bits)
_scaled_polynomial_compiled = mx.compile(_scaled_polynomial)


def _exp_compiled(x: mx.array) -> mx.array:
    return _scaled_polynomial_compiled(x, _exponent_bits_compiled(x).view(mx.float32))


@mx.custom_function
def fast_exp(x: mx.array) -> mx.array:
    """exp(x) for float32 ``x`` (other dtypes are computed in float32)."""
    return _exp_compiled(x.astype(mx.float32)).astype(x.dtype)


@fast_exp.vjp
def _fast_exp_vjp(primals, cotangent, output):
    return cotangent * output


def logsumexp(x: mx.array, axis: int = -1) -> mx.array:
    top = mx.stop_gradient(mx.max(x, axis=axis, keepdims=True))
    return mx.log(mx.sum(fast_exp(x - top), axis=axis)) + mx.squeeze(top, axis)


@mx.custom_function
def softmax(x: mx.array) -> mx.array:
    """Softmax over the last axis (computed in float32)."""
    x32 = x.astype(mx.float32)
    e = _exp_compiled(x32 - mx.max(x32, axis=-1, keepdims=True))
    return (e / mx.sum(e, axis=-1, keepdims=True)).astype(x.dtype)


@softmax.vjp
def _softmax_vjp(primals, cotangent, output):
    return _softmax_grad(output, cotangent)


@mx.compile
def _softmax_grad(y: mx.array, g: mx.array) -> mx.array:
    return y * (g - mx.sum(g * y, axis=-1, keepdims=True))


@mx.compile
def _swiglu_kernel(gate: mx.array, up: mx.array) -> mx.array:
    g = gate.astype(mx.float32)  # the exponent bit trick is float32's
    return (g / (1.0 + _exp_kernel(-g)) * up).astype(up.dtype)


@mx.custom_function
def swiglu(gate: mx.array, up: mx.array) -> mx.array:
    """silu(gate) * up."""
    return _swiglu_kernel(gate, up)


def _swiglu_terms(gate: mx.array, up: mx.array, cotangent: mx.array) -> tuple[mx.array, mx.array, mx.array, mx.array]:
    """(float32 gate, sigmoid(gate), d gate, d up) of silu(gate) * up (traced inside a compile)."""
    g = gate.astype(mx.float32)
    sig = 1.0 / (1.0 + _exp_kernel(-g))
    d_gate = cotangent * up * sig * (1.0 + g * (1.0 - sig))
    return g, sig, d_gate.astype(gate.dtype), (cotangent * g * sig).astype(up.dtype)


@mx.compile
def _swiglu_grads(gate: mx.array, up: mx.array, cotangent: mx.array) -> tuple[mx.array, mx.array]:
    return _swiglu_terms(gate, up, cotangent)[2:]


@swiglu.vjp
def _swiglu_vjp(primals, cotangent, output):
    return _swiglu_grads(primals[0], primals[1], cotangent)


@mx.custom_function
def swiglu_down(gate: mx.array, up: mx.array, weight: mx.array) -> mx.array:
    """``(silu(gate) * up) @ weight.T``, an MLP's down projection of its SwiGLU, whose backward
    recomputes silu(gate) * up instead of keeping it from the forward for the weight's gradient:
    one (positions, intermediate) array fewer per block between the forward and the backward."""
    return _swiglu_kernel(gate, up) @ weight.T


@swiglu_down.vjp
def _swiglu_down_vjp(primals, cotangent, output):
    # The recomputation waits for the cotangent, and the backward goes on past this block only
    # after the weight's gradient: else MLX's wider evaluation order runs the one early and defers
    # the other to the end, and every block's product is alive at once after all.
    gate, up = mx.depends([primals[0], primals[1]], [cotangent])
    product, d_gate, d_up = _swiglu_and_grads(gate, up, cotangent @ primals[2])
    d_weight = cotangent.reshape(-1, cotangent.shape[-1]).T @ product.reshape(-1, product.shape[-1])
    d_gate, d_up = mx.depends([d_gate, d_up], [d_weight])
    return d_gate, d_up, d_weight


@mx.compile
def _swiglu_and_grads(gate: mx.array, up: mx.array, cotangent: mx.array) -> tuple[mx.array, mx.array, mx.array]:
    """silu(gate) * up and its gradients, from one exp."""
    g, sig, d_gate, d_up = _swiglu_terms(gate, up, cotangent)
    return (g * sig * up).astype(up.dtype), d_gate, d_up


# ----------------------------------------------------------------------------- attention


def attention(q: mx.array, k: mx.array, v: mx.array, scale: float, mask: Any) -> mx.array:
    """``mx.fast.scaled_dot_product_attention`` (grouped-query, bool / additive / "causal" mask)
    with the softmax above. Masked scores get a large finite negative, so a fully masked row
    (left padding as query) stays finite and its neighbours never see a NaN."""
    B, H, L, D = q.shape
    kv_heads = k.shape[1]
    rep = H // kv_heads
    # A KV head's ``rep`` query heads as one (rep·L, D) matrix: B·kv matmuls instead of B·H on a
    # broadcast K, and no broadcast copies in the gradient.
    q = (q * scale).reshape(B, kv_heads, rep * L, D)
    weights = _masked_weights(q @ k.swapaxes(-1, -2), mask, rep, L).astype(v.dtype)
    return (weights @ v).reshape(B, H, L, D)


def _masked_weights(scores: mx.array, mask: Any, rep: int, L: int) -> mx.array:
    """The softmax weights of (B, kv, rep·L, S) scores under a bool / additive / "causal" mask
    (B or 1, 1, L, S), same shape as the scores, in float32."""
    B, kv_heads, _, S = scores.shape
    scores = scores.astype(mx.float32).reshape(B, kv_heads, rep, L, S)
    if isinstance(mask, str):
        mask = mx.arange(S - L, S)[:, None] >= mx.arange(S)[None]
    if mask is not None:
        if mask.ndim == 4:
            mask = mx.expand_dims(mask, 2)
        if mask.dtype == mx.bool_:
            scores = mx.where(mask, scores, mx.array(-1e30, scores.dtype))
        else:
            scores = scores + mask
    return softmax(scores).reshape(B, kv_heads, rep * L, S)


def prefix_attention(q: mx.array, prompt_k: mx.array, prompt_v: mx.array, k: mx.array, v: mx.array,
                     scale: float, mask: mx.array) -> mx.array:
    """``attention`` over a shared prompt's keys (``prompt_k``: one row per prompt, P rows) followed
    by each row's own keys (``k``: B = P·n rows, a prompt's n rows next to each other); ``mask``
    (B, 1, L, W + S) bool over both. A prompt's keys are read once for its n rows: its n·rep·L
    queries of a KV head are one matrix."""
    B, H, L, D = q.shape
    P, kv_heads, W, _ = prompt_k.shape
    n, rep = B // P, H // kv_heads

    def by_prompt(x: mx.array) -> mx.array:  # (B, kv, rep·L, X) -> (P, kv, n·rep·L, X)
        return x.reshape(P, n, kv_heads, rep * L, -1).swapaxes(1, 2).reshape(P, kv_heads, n * rep * L, -1)

    def by_row(x: mx.array) -> mx.array:  # the inverse
        return x.reshape(P, kv_heads, n, rep * L, -1).swapaxes(1, 2).reshape(B, kv_heads, rep * L, -1)

    q = (q * scale).reshape(B, kv_heads, rep * L, D)
    scores = mx.concatenate([by_row(by_prompt(q) @ prompt_k.swapaxes(-1, -2)), q @ k.swapaxes(-1, -2)], axis=-1)
    weights = _masked_weights(scores, mask, rep, L).astype(v.dtype)
    out = by_row(by_prompt(weights[..., :W]) @ prompt_v) + weights[..., W:] @ v
    return out.reshape(B, H, L, D)


# ----------------------------------------------------------------------------- RoPE

_TABLES: dict[tuple, tuple[mx.array, mx.array]] = {}


def _tables(dims: int, base: float, scale: float, length: int) -> tuple[mx.array, mx.array]:
    key = (dims, base, scale, length)
    if key not in _TABLES:
        inv = base ** (-np.arange(0, dims, 2, dtype=np.float32) / dims)
        theta = (scale * np.arange(length, dtype=np.float32))[:, None] * inv[None, :].astype(np.float32)
        _TABLES[key] = (mx.array(np.cos(theta).astype(np.float32)), mx.array(np.sin(theta).astype(np.float32)))
    return _TABLES[key]


def rope(rope_module: nn.RoPE, x: mx.array, offset: Any, max_positions: int) -> mx.array:
    """``rope_module(x, offset)`` for an ``nn.RoPE``, from cos/sin tables; ``offset`` is an int, a
    scalar array or one per row (B,)."""
    dims = rope_module.dims
    cos, sin = _tables(dims, float(rope_module.base), float(rope_module.scale), max_positions)
    L = x.shape[2]
    if isinstance(offset, mx.array) and offset.ndim == 1:
        positions = offset[:, None] + mx.arange(L)[None]  # (B, L)
        cos, sin = cos[positions][:, None], sin[positions][:, None]  # (B, 1, L, dims/2)
    elif isinstance(offset, int):
        cos, sin = cos[offset : offset + L], sin[offset : offset + L]
    else:
        positions = offset + mx.arange(L)
        cos, sin = cos[positions], sin[positions]
    cos, sin = cos.astype(x.dtype), sin.astype(x.dtype)
    rot, rest = (x[..., :dims], x[..., dims:]) if dims < x.shape[-1] else (x, None)
    if rope_module.traditional:
        pairs = rot.reshape(*rot.shape[:-1], dims // 2, 2)
        a, b = pairs[..., 0], pairs[..., 1]
        out = mx.stack([a * cos - b * sin, a * sin + b * cos], axis=-1).reshape(rot.shape)
    else:
        a, b = rot[..., : dims // 2], rot[..., dims // 2 :]
        out = mx.concatenate([a * cos - b * sin, a * sin + b * cos], axis=-1)
    return out if rest is None else mx.concatenate([out, rest], axis=-1)
