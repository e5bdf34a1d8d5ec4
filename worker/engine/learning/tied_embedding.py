"""A tied embedding's two gradients summed in place (docs/architecture.md, "Memory").

A model whose LM head is its embedding (Qwen3-0.6B, Qwen2.5-0.5B, Llama-3.2-1B) uses that weight
twice in a step. MLX's gradient of the lookup is a scatter into a dense (vocabulary, hidden) matrix
of zeros, which it then adds to the head's gradient: two more vocabulary-sized arrays at the end of
the backward pass (1.15 GiB of the 0.6B bench step's 10.74 GiB peak).

Here the lookup reads the weight through ``stop_gradient`` plus a zero (positions, hidden) offset,
and the offset is differentiated instead: its gradient is the lookup's, a few hundred rows. The
training pass adds those rows into the head's gradient after evaluating it (``fold``), where the
scatter writes into the gradient's own buffer: that step peaks at 9.60 GiB. Folded inside the same
lazy graph instead, the scatter waited for the whole backward pass and MLX's evaluation order (at
the engine's width) kept a copy beside it: 10.17 GiB. Same gradient (tested).
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import mlx.core as mx
import mlx.nn as nn

from grpo_tui.worker.engine.accel.llama_family import is_llama_family

LossFunction = Callable[[dict[str, mx.array], mx.array | None], Any]


def applies(model: nn.Module) -> bool:
    """A llama-family model whose trainable head is its plain (unquantized) embedding."""
    if not (is_llama_family(model) and getattr(model.args, "tie_word_embeddings", False)):
        return False
    table = model.model.embed_tokens
    return isinstance(table, nn.Embedding) and "weight" in table.trainable_parameters()


def lookup(model: nn.Module, ids: mx.array, offset: mx.array) -> mx.array:
    """The embeddings of ``ids`` (any shape): the weight's rows through ``stop_gradient`` plus the
    (ids.size, hidden) ``offset``, so that the lookup's gradient is the offset's."""
    rows = mx.stop_gradient(model.model.embed_tokens.weight)[ids]
    return rows + offset.reshape(rows.shape)


class LookupGradient(NamedTuple):
    """The tied lookup's gradient: ``gradient[i]`` belongs to the head's row ``ids[i]``."""

    ids: mx.array  # (positions,)
    gradient: mx.array  # (positions, hidden)


def value_and_grad(model: nn.Module, loss: LossFunction, ids_of: Callable[[dict[str, mx.array]], mx.array]
                   ) -> Callable[[dict[str, mx.array]], tuple[Any, Any, tuple[mx.array, mx.array]]]:
    """``nn.value_and_grad(model, ...)`` for a model that ``applies``, returning (value, gradients
    with the head's part alone, (ids, lookup gradient)) for ``fold``. ``loss(arrays, offset)``
    embeds ``ids_of(arrays)`` (in its lookup's order) through ``lookup`` with the offset."""

    def on_parameters(parameters: dict, offset: mx.array, arrays: dict[str, mx.array]) -> Any:
        model.update(parameters)
        return loss(arrays, offset)

    value_and_grads = mx.value_and_grad(on_parameters, argnums=(0, 1))

    def run(arrays: dict[str, mx.array]) -> tuple[Any, Any, tuple[mx.array, mx.array]]:
        ids = ids_of(arrays).reshape(-1)
        weight = model.model.embed_tokens.weight
        offset = mx.zeros((ids.size, weight.shape[1]), dtype=weight.dtype)
        value, (grads, d_offset) = value_and_grads(model.trainable_parameters(), offset, arrays)
        return value, grads, (ids, d_offset)  # a plain tuple: what mx.compile returns of any tuple

    return run


def fold(grads: dict, lookups: list[LookupGradient]) -> dict:
    """``grads`` with the lookups' gradients added into the tied head's rows. Evaluated after the
    head's gradient, which nothing else holds, the scatter writes into its buffer."""
    table = grads["model"]["embed_tokens"]
    weight = table.pop("weight")
    for found in lookups:
        weight = weight.at[found.ids].add(found.gradient.astype(weight.dtype))
    table["weight"] = weight
    return grads
