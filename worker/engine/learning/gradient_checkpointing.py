"""Gradient checkpointing (``[training] gradient_checkpointing``, TRL's name; docs/config.md,
"Memory"): each transformer block keeps only its input for the backward pass and recomputes its
activations there (``mx.checkpoint``), trading about one more forward pass for most of the
activation memory.

A per-instance ``__class__`` swap like ``accel.patches`` (never a class-wide patch, which would
also change every other model in the process), and only while the model trains: the rollout and
the reference model's log-probs run the block as it is, and so does the shared prompt's pass (its
keys/values leave the block through the cache; ``accel.shared_prompt``). Same numbers as the plain
blocks (tested), except with LoRA dropout, whose mask is drawn again when a block is recomputed.
"""

from __future__ import annotations

from typing import Any

import mlx.core as mx
import mlx.nn as nn

_SUBCLASSES: dict[type, type] = {}


def _checkpointed(cls: type) -> type:
    plain_call = cls.__call__

    def __call__(self: nn.Module, *args: Any, **kwargs: Any) -> Any:
        cache: Any = kwargs.get("cache", args[2] if len(args) > 2 else None)
        # A cache that keeps the block's keys as a side output (accel.shared_prompt's prompt pass)
        # carries gradient that mx.checkpoint's recomputation would cut: that block runs as it is.
        if not self.training or getattr(cache, "keeps_keys", False):
            return plain_call(self, *args, **kwargs)

        def block(parameters: dict, prefix: tuple, *inner: Any, **named: Any) -> Any:
            self.update(parameters)  # the recomputation sees the arrays the gradient is taken for
            if prefix:  # likewise the repeated prompt keys/values the completions attend to
                cache.prefix_keys, cache.prefix_values = prefix
            return plain_call(self, *inner, **named)

        # mx.checkpoint differentiates its arguments only: arrays the block reads through its
        # cache (accel.shared_prompt's prompt keys/values) must be arguments, or their gradient
        # (to the prompt's blocks) would be lost.
        prefix = (cache.prefix_keys, cache.prefix_values) if hasattr(cache, "prefix_keys") else ()
        return mx.checkpoint(block)(self.trainable_parameters(), prefix, *args, **kwargs)

    return type(f"Checkpointed{cls.__name__}", (cls,), {"__call__": __call__})


def checkpoint_blocks(model: nn.Module) -> bool:
    """Recompute each of ``model``'s transformer blocks in the backward pass; False (nothing
    changed) when the model has no ``layers`` list."""
    layers = getattr(getattr(model, "model", None), "layers", None) or getattr(model, "layers", None)
    if not layers:
        return False
    for layer in layers:
        cls = type(layer)
        if cls in _SUBCLASSES.values():
            continue
        if cls not in _SUBCLASSES:
            _SUBCLASSES[cls] = _checkpointed(cls)
        layer.__class__ = _SUBCLASSES[cls]
    return True


def is_checkpointed(model: nn.Module) -> bool:
    layers = getattr(getattr(model, "model", None), "layers", None) or []
    return bool(layers) and type(layers[0]) in _SUBCLASSES.values()
