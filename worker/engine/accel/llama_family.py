"""What the engine's fast paths rely on in mlx-lm's llama-family models (qwen2, qwen3, llama,
mistral): logits are ``lm_head(model.model(x))`` (or the tied embedding), and attention goes through
``cache.offset``, ``cache.update_and_fetch`` and the mask the first cache's ``make_mask`` returns.
``fastgen`` (rollouts), ``shared_prompt`` (training forward), ``patches`` and the engine's
``logps`` use these."""

from __future__ import annotations

from typing import Any

import mlx.core as mx

MODEL_TYPES = frozenset({"qwen2", "qwen3", "llama", "mistral"})


def is_llama_family(model: Any) -> bool:
    """A llama-family model whose every layer attends to the full context (mlx-lm's llama takes
    ``layer_types`` with sliding-window layers, which the masks here do not model)."""
    args = getattr(model, "args", None)
    full = all(t == "full_attention" for t in (getattr(args, "layer_types", None) or []))
    return getattr(args, "model_type", None) in MODEL_TYPES and hasattr(model, "model") and full


def head_logits(model: Any, hidden: mx.array) -> mx.array:
    """The vocabulary logits of final hidden states: the LM head, or the tied embedding."""
    if model.args.tie_word_embeddings:
        return model.model.embed_tokens.as_linear(hidden)
    return model.lm_head(hidden)


def padded_causal_mask(left_pad: mx.array, queries: int, first: mx.array | int, keys: int) -> mx.array:
    """(rows, 1, queries, keys): query i (at position first + i; ``first`` a scalar or one per
    row) sees the keys that are neither padding nor in the future. A query always sees its own
    position, so a padding query's row is never empty (an empty row is NaN in a softmax, and NaN
    values spread through zero weights)."""
    k = mx.arange(keys)[None, None, None, :]
    first = first if isinstance(first, mx.array) else mx.array(first)
    q = (first.reshape(-1, 1) + mx.arange(queries)[None])[:, None, :, None]
    return ((k >= left_pad[:, None, None, None]) & (k <= q)) | (k == q)


class MaskedCache:
    """The mlx-lm cache protocol around a precomputed mask; subclasses say how keys/values grow."""

    def __init__(self, offset: Any, mask: mx.array) -> None:
        self.offset, self.mask = offset, mask

    def make_mask(self, n: int, return_array: bool = False, window_size: int | None = None) -> mx.array:
        return self.mask

    def __bool__(self) -> bool:  # mlx-lm tests ``if cache`` before asking for the mask
        return True
