"""The LM head and vocabulary log-softmax a chunk of positions at a time (``[training]
vocab_chunk_size``; docs/config.md, "Memory").

Unchunked, a micro-batch's (rows, steps, vocabulary) float32 logits exist at once, several times
over in the differentiated graph (logits, softmax, their cotangents): on a 152k vocabulary, 8 × 256
positions are 1.2 GB per copy. Here one custom function takes the final hidden states and the head's
weight and returns the targets' log-probs and the entropy; it projects ``chunk`` positions onto the
vocabulary at a time, and its gradient recomputes each chunk's logits instead of keeping them.

Nothing is evaluated inside: under MLX's gradient transform an evaluated array keeps its whole graph
(the forward's arrays are tracers, a VJP runs with the graph retained), so evaluating per chunk kept
every chunk's logits and every block's intermediates alive (20.9 GiB against the unchunked 9.4 on
the 4-layer 0.6B shape, bench/memory.py). Instead each chunk's logits depend on the previous
chunk's results (``mx.depends``), so the one lazy evaluation of the step builds a chunk's logits
only after the previous chunk's are consumed and freed. MLX's own log-softmax therefore runs here,
never ``accel.host_vocab``'s numpy one (which evaluates). Same numbers as the unchunked path,
tested for full and LoRA fine-tuning.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Callable

import mlx.core as mx
import mlx.nn as nn

from .accel.llama_family import is_llama_family


def head_weight(model: nn.Module) -> mx.array | None:
    """The (vocabulary, hidden) weight of a plain (unquantized, bias-free) LM head, else None."""
    if not is_llama_family(model):
        return None
    tied = getattr(model.args, "tie_word_embeddings", False)
    head = model.model.embed_tokens if tied else getattr(model, "lm_head", None)
    if not isinstance(head, (nn.Linear, nn.Embedding)) or "bias" in head or "scales" in head:
        return None
    return head["weight"]


def supports(model: nn.Module) -> bool:
    return head_weight(model) is not None


def _mlx_forward(logits: mx.array, targets: mx.array) -> tuple[mx.array, mx.array]:
    lse = mx.logsumexp(logits, axis=-1)
    picked = mx.take_along_axis(logits, targets[:, None], axis=-1)[:, 0]
    entropy = lse - mx.sum(mx.softmax(logits, axis=-1) * logits, axis=-1)
    return picked - lse, entropy


def _mlx_gradient(logits: mx.array, targets: mx.array, cotangent: mx.array) -> mx.array:
    # d logp[target] / d logits = onehot(target) - softmax(logits)
    onehot = mx.arange(logits.shape[-1])[None, :] == targets[:, None]
    return (onehot.astype(mx.float32) - mx.softmax(logits, axis=-1)) * cotangent[:, None]


@lru_cache(maxsize=None)
def _function(chunk: int, temperature: float, weight_grad: bool) -> Callable:
    """The custom function for one setting (cached: a custom function is built once per setting)."""

    def chunks(rows: int) -> list[slice]:
        return [slice(s, min(s + chunk, rows)) for s in range(0, rows, chunk)]

    def logits_of(hidden: mx.array, weight: mx.array) -> mx.array:
        return (hidden @ weight.T).astype(mx.float32) / temperature

    @mx.custom_function
    def logps_entropy(hidden: mx.array, weight: mx.array, targets: mx.array) -> tuple[mx.array, mx.array]:
        logps: list[mx.array] = []
        entropy: list[mx.array] = []
        for rows in chunks(hidden.shape[0]):
            # This chunk's logits wait for the previous chunk's results (mx.depends): MLX frees a
            # chunk's logits before it builds the next chunk's, in one lazy evaluation.
            part = mx.depends(hidden[rows], logps[-1:] + entropy[-1:]) if logps else hidden[rows]
            picked, ent = _mlx_forward(logits_of(part, weight), targets[rows])
            logps.append(picked)
            entropy.append(ent)
        return mx.concatenate(logps), mx.concatenate(entropy)

    @logps_entropy.vjp
    def _vjp(primals, cotangents, outputs):
        hidden, weight, targets = primals
        cotangent = cotangents[0].astype(mx.float32) / temperature  # the entropy is a metric
        d_hidden: list[mx.array] = []
        d_weight: mx.array | None = None  # the running sum over chunks: one (vocabulary, hidden) part at a time
        for rows in chunks(hidden.shape[0]):
            after = d_hidden[-1:] + ([d_weight] if d_weight is not None else [])
            part = mx.depends(hidden[rows], after) if after else hidden[rows]
            d_logits = _mlx_gradient(logits_of(part, weight), targets[rows], cotangent[rows]).astype(hidden.dtype)
            d_hidden.append(d_logits @ weight)
            if weight_grad:  # LoRA's frozen head needs none: skip its matmul
                term = (d_logits.T @ part).astype(mx.float32)
                d_weight = term if d_weight is None else d_weight + term
        grad = mx.zeros_like(weight) if d_weight is None else d_weight.astype(weight.dtype)
        return mx.concatenate(d_hidden), grad, mx.zeros_like(targets)

    return logps_entropy


def logps_entropy(model: nn.Module, hidden: mx.array, targets: mx.array, temperature: float,
                  chunk: int) -> tuple[mx.array, mx.array]:
    """(log-probs of ``targets``, entropy), both (B, T), of ``hidden`` (B, T, H) through the model's
    head on logits / temperature, ``chunk`` positions at a time."""
    weight = head_weight(model)
    assert weight is not None, "the plan enables vocab_chunk_size only for plain heads"
    rows, steps, width = hidden.shape
    weight_grad = head_trainable(model)
    fn = _function(chunk, float(temperature), weight_grad)
    logps, entropy = fn(hidden.reshape(rows * steps, width), weight, targets.reshape(-1))
    return logps.reshape(rows, steps), mx.stop_gradient(entropy).reshape(rows, steps)


def head_trainable(model: nn.Module) -> bool:
    tied = getattr(model.args, "tie_word_embeddings", False)
    head = model.model.embed_tokens if tied else model.lm_head
    return "weight" in head.trainable_parameters()
