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
only after the previous chunk's are consumed and freed. MLX therefore computes the log-softmax
here, never ``accel.host_vocab``'s numpy (which evaluates): one vocabulary-wide ``exp`` per chunk
forward (``softmax_stats``) and one backward, through ``cpu_fast``'s exp on x86.

Unchunked (``chunk = 0``, the plan's ``fused_head``: models the numpy log-softmax is not for) the
same function takes every position at once and keeps the softmax for its backward: one ``exp`` in
all where MLX's logsumexp, softmax and logsumexp gradient take three, at the memory of MLX's own
path (the softmax is kept instead of the logits). Same numbers as the unchunked MLX path, tested for
full and LoRA fine-tuning.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Callable

import mlx.core as mx
import mlx.nn as nn

from .accel import cpu_fast
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


def _exp(x: mx.array) -> mx.array:
    # MLX's own CPU exp is a libm call per element on x86 (accel.cpu_fast): half the speed.
    return cpu_fast.fast_exp(x) if cpu_fast.enabled() else mx.exp(x)


def softmax_stats(logits: mx.array, targets: mx.array) -> tuple[mx.array, mx.array, mx.array, mx.array]:
    """(log softmax(logits)[target], entropy, log-sum-exp, softmax) of (N, V) float32 ``logits``,
    from one ``exp`` over the vocabulary (MLX's logsumexp and softmax take one each, and the
    gradient of logsumexp a third)."""
    top = mx.max(logits, axis=-1, keepdims=True)
    unnormalised = _exp(logits - top)
    total = mx.sum(unnormalised, axis=-1, keepdims=True)
    lse = (top + mx.log(total))[:, 0]
    probs = unnormalised / total
    picked = mx.take_along_axis(logits, targets[:, None], axis=-1)[:, 0]
    return picked - lse, lse - mx.sum(probs * logits, axis=-1), lse, probs


def gradient_from_probs(probs: mx.array, targets: mx.array, cotangent: mx.array) -> mx.array:
    """d(cotangent · log softmax[target]) / d logits = cotangent · (onehot(target) - softmax)."""
    d_logits = probs * (-cotangent)[:, None]
    at = targets[:, None]
    return mx.put_along_axis(d_logits, at, mx.take_along_axis(d_logits, at, axis=-1) + cotangent[:, None], axis=-1)


def _logits(hidden: mx.array, weight: mx.array, temperature: float) -> mx.array:
    return (hidden @ weight.T).astype(mx.float32) / temperature


@lru_cache(maxsize=None)
def _whole_function(temperature: float, weight_grad: bool) -> Callable:
    """The head and log-softmax over every position at once, the softmax kept for the backward
    (the plan's ``fused_head``: the same memory as MLX's own path, whose backward keeps the
    logits, with one vocabulary-wide ``exp`` in all instead of three)."""

    @mx.custom_function
    def logps_entropy(hidden: mx.array, weight: mx.array, targets: mx.array) -> tuple[mx.array, mx.array, mx.array]:
        picked, entropy, _, probs = softmax_stats(_logits(hidden, weight, temperature), targets)
        return picked, entropy, probs

    @logps_entropy.vjp
    def _vjp(primals, cotangents, outputs):
        hidden, weight, targets = primals
        cotangent = cotangents[0].astype(mx.float32) / temperature  # the entropy is a metric
        d_logits = gradient_from_probs(outputs[2], targets, cotangent).astype(hidden.dtype)
        grad = (d_logits.T @ hidden).astype(weight.dtype) if weight_grad else mx.zeros_like(weight)
        return d_logits @ weight, grad, mx.zeros_like(targets)

    return logps_entropy


@lru_cache(maxsize=None)
def _function(chunk: int, temperature: float, weight_grad: bool) -> Callable:
    """The custom function for one setting (cached: a custom function is built once per setting)."""

    def chunks(rows: int) -> list[slice]:
        return [slice(s, min(s + chunk, rows)) for s in range(0, rows, chunk)]

    def logits_of(hidden: mx.array, weight: mx.array) -> mx.array:
        return _logits(hidden, weight, temperature)

    @mx.custom_function
    def logps_entropy(hidden: mx.array, weight: mx.array, targets: mx.array) -> tuple[mx.array, mx.array, mx.array]:
        logps: list[mx.array] = []
        entropy: list[mx.array] = []
        lse: list[mx.array] = []
        for rows in chunks(hidden.shape[0]):
            # This chunk's logits wait for the previous chunk's results (mx.depends): MLX frees a
            # chunk's logits before it builds the next chunk's, in one lazy evaluation.
            part = mx.depends(hidden[rows], logps[-1:] + entropy[-1:] + lse[-1:]) if logps else hidden[rows]
            picked, ent, total, _ = softmax_stats(logits_of(part, weight), targets[rows])
            logps.append(picked)
            entropy.append(ent)
            lse.append(total)
        # The log-sum-exp is an output so that the backward's softmax is one exp, not two.
        return mx.concatenate(logps), mx.concatenate(entropy), mx.concatenate(lse)

    @logps_entropy.vjp
    def _vjp(primals, cotangents, outputs):
        hidden, weight, targets = primals
        lse = outputs[2]
        cotangent = cotangents[0].astype(mx.float32) / temperature  # the entropy is a metric
        d_hidden: list[mx.array] = []
        d_weight: mx.array | None = None  # the running sum over chunks: one (vocabulary, hidden) part at a time
        for rows in chunks(hidden.shape[0]):
            after = d_hidden[-1:] + ([d_weight] if d_weight is not None else [])
            part = mx.depends(hidden[rows], after) if after else hidden[rows]
            probs = _exp(logits_of(part, weight) - lse[rows][:, None])
            d_logits = gradient_from_probs(probs, targets[rows], cotangent[rows]).astype(hidden.dtype)
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
    head on logits / temperature, ``chunk`` positions at a time (0: all at once, ``_whole_function``)."""
    weight = head_weight(model)
    assert weight is not None, "the plan enables vocab_chunk_size and fused_head only for plain heads"
    rows, steps, width = hidden.shape
    weight_grad = _head_trainable(model)
    fn = _function(chunk, float(temperature), weight_grad) if chunk else _whole_function(float(temperature), weight_grad)
    logps, entropy, _ = fn(hidden.reshape(rows * steps, width), weight, targets.reshape(-1))
    return logps.reshape(rows, steps), mx.stop_gradient(entropy).reshape(rows, steps)


def _head_trainable(model: nn.Module) -> bool:
    tied = getattr(model.args, "tie_word_embeddings", False)
    head = model.model.embed_tokens if tied else model.lm_head
    return "weight" in head.trainable_parameters()
