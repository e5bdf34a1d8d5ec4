"""What runs instead of stock mlx-lm: the two ``__class__`` swaps on a loaded model
(docs/architecture.md, "Accelerations"). Same parameters and checkpoints, same maths.

- ``row_major_weight_grads`` (every model): ``Linear``/``Embedding`` whose weight gradients come
  out row-major like the weights, and whose small-row matmuls stream the weight.
- ``patch_model`` (the plan's ``cpu_kernels``): a llama-family model's attention and MLP through
  ``cpu_fast``'s multiply-add kernels.
"""

from __future__ import annotations

from typing import Any

import mlx.core as mx
import mlx.nn as nn

from grpo_tui.worker.engine.accel import cpu_fast
from grpo_tui.worker.engine.accel.llama_family import is_llama_family

# Up to this many rows (decoding: one token per sequence), ``(weight @ xᵀ)ᵀ`` streams the weight
# through sgemm faster than ``x @ weightᵀ``; the output is small, so its transposed layout is free.
DECODE_ROWS = 64
FLIP_MIN_WEIGHT = 1 << 20  # smaller weights sit in cache: there the flip's extra copies cost more


@mx.custom_function
def _linear(x: mx.array, weight: mx.array) -> mx.array:
    return x @ weight.T


@_linear.vjp
def _linear_vjp(primals, cotangent, output):
    x, weight = primals
    flat = cotangent.reshape(-1, cotangent.shape[-1])
    # cotangentᵀ·x is a plain matmul output: row-major, like the weight and AdamW's m and v. MLX's
    # own VJP of ``x @ weight.T`` returns a transposed view, and every elementwise op that mixes the
    # two layouts (norm, clipping, AdamW) is much slower on CPU.
    return cotangent @ weight, flat.T @ x.reshape(-1, x.shape[-1])


def _matmul_t(x: mx.array, weight: mx.array) -> mx.array:
    """``x @ weight.T``, arranged for speed on CPU (same maths)."""
    rows = x.size // x.shape[-1]
    if rows == 1 or (rows <= DECODE_ROWS and weight.size < FLIP_MIN_WEIGHT):
        return x @ weight.T
    if rows <= DECODE_ROWS:  # plain ops: their weight gradient (cotᵀ·x) is row-major already
        return (weight @ x.reshape(rows, x.shape[-1]).T).T.reshape(*x.shape[:-1], weight.shape[0])
    return _linear(x, weight)


class _Linear(nn.Linear):
    def __call__(self, x: mx.array) -> mx.array:
        y = _matmul_t(x, self["weight"])
        return y + self["bias"] if "bias" in self else y


class _Embedding(nn.Embedding):
    def as_linear(self, x: mx.array) -> mx.array:  # the tied output projection
        return _matmul_t(x, self.weight)


def row_major_weight_grads(model: nn.Module) -> None:
    """Make the gradients of plain ``Linear``/``Embedding`` weights row-major (same maths): the
    fused AdamW, the norm and the clipping mix gradient and weight, and mixed layouts are slow."""
    for _, module in model.named_modules():
        if type(module) is nn.Linear:
            module.__class__ = _Linear
        elif type(module) is nn.Embedding:
            module.__class__ = _Embedding



def _attention_call(self, x: mx.array, mask: Any = None, cache: Any = None) -> mx.array:
    B, L, _ = x.shape
    queries = self.q_proj(x).reshape(B, L, self.n_heads, -1)
    keys = self.k_proj(x).reshape(B, L, self.n_kv_heads, -1)
    values = self.v_proj(x).reshape(B, L, self.n_kv_heads, -1).transpose(0, 2, 1, 3)
    if hasattr(self, "q_norm"):
        queries, keys = self.q_norm(queries), self.k_norm(keys)
    queries, keys = queries.transpose(0, 2, 1, 3), keys.transpose(0, 2, 1, 3)
    offset = cache.offset if cache is not None else 0
    if type(self.rope) is nn.RoPE:
        queries = cpu_fast.rope(self.rope, queries, offset, self._rope_positions)
        keys = cpu_fast.rope(self.rope, keys, offset, self._rope_positions)
    else:
        queries, keys = self.rope(queries, offset=offset), self.rope(keys, offset=offset)
    if hasattr(cache, "attend"):  # fastgen.SharedPromptCache: the group's prompt keys read once
        output = cache.attend(queries, keys, values, self.scale)
    else:
        if cache is not None:
            keys, values = cache.update_and_fetch(keys, values)
        output = cpu_fast.attention(queries, keys, values, self.scale, mask)
    return self.o_proj(output.transpose(0, 2, 1, 3).reshape(B, L, -1))


def _mlp_call(self, x: mx.array) -> mx.array:
    gate, up = self.gate_proj(x), self.up_proj(x)
    down = self.down_proj
    # Training shapes of a trainable plain down projection (not LoRA's, not quantized, not frozen):
    # the backward recomputes the SwiGLU instead of keeping it (cpu_fast.swiglu_down). Decoding
    # keeps _matmul_t's arrangement.
    if (type(down) in (nn.Linear, _Linear) and "bias" not in down and x.size // x.shape[-1] > DECODE_ROWS
            and "weight" in down.trainable_parameters()):
        return cpu_fast.swiglu_down(gate, up, down.weight)
    return down(cpu_fast.swiglu(gate, up))


_SUBCLASSES: dict[type, type] = {}


def _swap(module: nn.Module, call: Any) -> None:
    cls = type(module)
    if cls not in _SUBCLASSES:
        _SUBCLASSES[cls] = type(f"CpuFast{cls.__name__}", (cls,), {"__call__": call})
    module.__class__ = _SUBCLASSES[cls]


def can_patch(model: nn.Module) -> bool:
    """Whether ``patch_model`` recognises the architecture and shapes of ``model``."""
    layers = getattr(getattr(model, "model", None), "layers", None)
    if not is_llama_family(model) or not layers:
        return False
    for layer in layers:
        attn, mlp = getattr(layer, "self_attn", None), getattr(layer, "mlp", None)
        needed = ("q_proj", "k_proj", "v_proj", "o_proj", "n_heads", "n_kv_heads", "scale", "rope")
        if attn is None or mlp is None or not all(hasattr(attn, n) for n in needed):
            return False
        if not all(hasattr(mlp, n) for n in ("gate_proj", "up_proj", "down_proj")):
            return False
    return True


def patch_model(model: nn.Module) -> bool:
    """Route a llama-family model's attention and MLP through ``cpu_fast``; False (and nothing
    changed) for other architectures or shapes we do not recognise."""
    if not can_patch(model):
        return False
    args = getattr(model, "args", None)
    layers = model.model.layers
    positions = int(getattr(args, "max_position_embeddings", 0) or 32768)
    for layer in layers:
        # Plain attribute (not an array): it must not become a parameter.
        object.__setattr__(layer.self_attn, "_rope_positions", max(positions, 4096))
        _swap(layer.self_attn, _attention_call)
        _swap(layer.mlp, _mlp_call)
    return True


def is_patched(model: nn.Module) -> bool:
    layers = getattr(getattr(model, "model", None), "layers", None) or []
    return bool(layers) and type(getattr(layers[0], "mlp", None)) in _SUBCLASSES.values()
