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
forward (``softmax_stats``) and one backward, ``_exp``'s one op on x86.

The plan's ``fused_head`` (models the numpy log-softmax is not for) runs the same function with
``fused_chunk`` positions (58 MB of logits) per chunk: two ``exp`` passes where MLX's logsumexp,
softmax and logsumexp gradient take three, and less memory than MLX's own path. Same numbers as
the unchunked MLX path, tested for full and LoRA fine-tuning.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Callable

import mlx.core as mx
import mlx.nn as nn

from grpo_tui.worker.engine.accel import cpu_fast
from grpo_tui.worker.engine.accel.llama_family import is_llama_family
from grpo_tui.worker.engine.accel.temperature import tempered
from grpo_tui.worker.engine.learning.token_stats import TokenStats


Quantization = tuple[int, int, str] | None  # (group_size, bits, mode) of a quantized head, None if plain
HeadArrays = tuple[mx.array, ...]  # (weight,) of a plain head; (weight, scales[, biases]) of a quantized one


def _head_module(model: nn.Module) -> nn.Module | None:
    """The module that projects onto the vocabulary: the tied embedding or ``lm_head``."""
    tied = getattr(model.args, "tie_word_embeddings", False)
    return model.model.embed_tokens if tied else getattr(model, "lm_head", None)


def head_of(model: nn.Module) -> tuple[HeadArrays, Quantization] | None:
    """A bias-free LM head's arrays and quantization (a 4-bit mlx-community model's tied
    embedding too), else None."""
    if not is_llama_family(model):
        return None
    head = _head_module(model)
    if head is None or "bias" in head:
        return None
    if isinstance(head, (nn.QuantizedLinear, nn.QuantizedEmbedding)):
        biases = head.get("biases")
        arrays = (head["weight"], head["scales"]) + ((biases,) if biases is not None else ())
        return arrays, (head.group_size, head.bits, head.mode)
    if isinstance(head, (nn.Linear, nn.Embedding)) and "scales" not in head:
        return (head["weight"],), None
    return None


def supports(model: nn.Module) -> bool:
    return head_of(model) is not None


def plain_weight(model: nn.Module) -> mx.array | None:
    """The (vocabulary, hidden) weight of a plain (unquantized, bias-free) head, else None (what
    ``accel.host_head`` takes)."""
    found = head_of(model)
    return found[0][0] if found is not None and found[1] is None else None


def _project(hidden: mx.array, head: HeadArrays, quantization: Quantization, transpose: bool = True) -> mx.array:
    """``hidden @ W.T`` (the logits), or with ``transpose=False`` ``d_logits @ W`` (their gradient's
    hidden part), for the head's (vocabulary, hidden) weight W, quantized or not."""
    if quantization is None:
        return hidden @ head[0].T if transpose else hidden @ head[0]
    group_size, bits, mode = quantization
    return mx.quantized_matmul(hidden, head[0], scales=head[1], biases=head[2] if len(head) > 2 else None,
                               transpose=transpose, group_size=group_size, bits=bits, mode=mode)


_E = mx.array(math.e, dtype=mx.float32)


def _exp(x: mx.array) -> mx.array:
    """exp(x). MLX's own CPU exp is a libm ``fma`` call per polynomial term on x86
    (``accel.cpu_fast``). ``cpu_fast``'s compiled exp does not help here: this function runs inside
    the gradient transform, where ``mx.compile`` runs a traced input's graph op by op (14 passes
    over the chunk). ``e ** x`` is one op, libm's ``powf`` per element, faster than either (traced
    ``fast_exp`` or ``mx.exp``); the float32 e's rounding
    leaves a relative error of at most 3e-6 over the float32 range of exp."""
    return mx.power(_E, x) if cpu_fast.enabled() else mx.exp(x)


# MLX's CPU evaluation queues about 100 dispatches (10 tasks of 10) ahead of the CPU and allocates
# each op's output when it queues the op; mx.depends orders the chunks but does not hold that
# back. A chunk is ~12 dispatches, so ~8 chunks' vocabulary-sized arrays were allocated at once,
# and the weight gradient's running sum was copied (545 MB on the 0.5B shape) instead of summed in
# place while its previous term was still queued. One-element adds between chunks keep about two
# chunks in flight (the 0.5B head's gradient on 1,024 positions: 2,951 -> 1,200 MiB at the peak,
# 1,581 before the one-op exp; bench/README.md), for ~3 µs each.
QUEUE_GAP = 40


def _after(part: mx.array, previous: list[mx.array]) -> mx.array:
    """``part``, once ``previous`` are computed, with ``QUEUE_GAP`` tiny ops between on the CPU."""
    if not previous:
        return part
    if mx.default_device() == mx.cpu:
        tick = previous[0].reshape(-1)[:1]
        for _ in range(QUEUE_GAP):
            tick = tick + 1.0
        previous = previous + [tick]
    return mx.depends(part, previous)


def softmax_stats(logits: mx.array, targets: mx.array) -> tuple[mx.array, mx.array, mx.array, mx.array]:
    """(log softmax(logits)[target], entropy, log-sum-exp, 1 where the target is the most likely
    token) of (N, V) float32 ``logits``,
    from one ``exp`` over the vocabulary (MLX's logsumexp and softmax take one each, and the
    gradient of logsumexp a third). The entropy is log Σe - Σ e·s / Σe of the shifted logits s and
    e = exp(s): no normalised softmax, and the Σ e·s a matrix product with no (N, V) array of its
    own (one vocabulary-sized array fewer)."""
    top = mx.max(logits, axis=-1, keepdims=True)
    picked = mx.take_along_axis(logits, targets[:, None], axis=-1)[:, 0]
    shifted = logits - top
    unnormalised = _exp(shifted)
    total = mx.sum(unnormalised, axis=-1)
    weighted = (unnormalised[:, None, :] @ shifted[:, :, None])[:, 0, 0]
    log_total = mx.log(total)
    lse = top[:, 0] + log_total
    return picked - lse, log_total - weighted / total, lse, (picked >= top[:, 0]).astype(mx.float32)


def logits_gradient(logits: mx.array, lse: mx.array, targets: mx.array, cotangent: mx.array) -> mx.array:
    """d(cotangent · log softmax(logits)[target]) / d logits = cotangent · (onehot(target) - softmax),
    from the (N, V) logits and their (N,) log-sum-exp. The targets' entries come from their own
    logits, so nothing but the scatter reads the -cotangent · softmax array and MLX's scatter writes
    into its buffer instead of copying it."""
    at = targets[:, None]
    shift, scale = lse[:, None], -cotangent[:, None]
    d_target = _exp(mx.take_along_axis(logits, at, axis=-1) - shift) * scale + cotangent[:, None]
    return mx.put_along_axis(_exp(logits - shift) * scale, at, d_target, axis=-1)


def entropy_gradient(logits: mx.array, lse: mx.array, entropy: mx.array, cotangent: mx.array) -> mx.array:
    """d(cotangent · entropy(logits)) / d logits = -cotangent · p · (log p + H), from the (N, V)
    logits, their (N,) log-sum-exp and entropy (the entropy bonus's part of the gradient)."""
    log_p = logits - lse[:, None]
    return _exp(log_p) * (log_p + entropy[:, None]) * -cotangent[:, None]


def _logits(hidden: mx.array, head: HeadArrays, quantization: Quantization, temperature: float) -> mx.array:
    logits = _project(hidden, head, quantization).astype(mx.float32)
    return tempered(logits, temperature)


def _head_gradient(head: HeadArrays, d_weight: mx.array | None) -> tuple[mx.array, ...]:
    """The head arrays' cotangents: the summed weight gradient (None: frozen), zeros elsewhere."""
    grads = [mx.zeros_like(a) for a in head]
    if d_weight is not None:
        grads[0] = d_weight.astype(head[0].dtype)
    return tuple(grads)


# The plan's fused head runs this function on every large model, that many bytes of float32 logits
# per chunk: all positions at once kept several vocabulary-sized arrays alive at the backward (the
# 4-layer 0.6B memory step peaked at 14.2 GiB against MLX's own path's 9.4). MLX allocates the
# outputs of the ops it has queued, several per chunk, so the chunk's size sets that too: on the
# 0.5B shape's 1,024 positions the head's gradient peaks 1,564 MiB above its inputs with 128 MB
# chunks (220 positions), 1,262 with 80 MB (138) and 1,059 with 58 MB (100), at 1.12x the 80 MB
# chunks' time (bench/memory_limit.py); the whole 0.5B step peaked 204 MiB lower (MLX) and 241
# lower (resident) with 58 MB, the head being ~15 % of it.
FUSED_CHUNK_BYTES = 58 * 2**20


def fused_chunk(vocabulary: int) -> int:
    """Positions per chunk of the plan's fused head (100 for a 151,936 vocabulary)."""
    return max(16, FUSED_CHUNK_BYTES // (4 * max(vocabulary, 1)))


@lru_cache(maxsize=None)
def _function(chunk: int, temperature: float, weight_grad: bool, quantization: Quantization,
              in_place: bool = False, entropy_grad: bool = False) -> Callable:
    """The custom function for one setting (cached: a custom function is built once per setting).
    ``in_place``: see the backward's running sum. ``entropy_grad``: the entropy's cotangent counts
    too (the entropy bonus); else the entropy is a metric."""

    def chunks(rows: int) -> list[slice]:
        return [slice(s, min(s + chunk, rows)) for s in range(0, rows, chunk)]

    def logits_of(hidden: mx.array, head: HeadArrays) -> mx.array:
        return _logits(hidden, head, quantization, temperature)

    @mx.custom_function
    def logps_entropy(hidden: mx.array, head: HeadArrays, targets: mx.array) -> tuple[mx.array, ...]:
        logps: list[mx.array] = []
        entropy: list[mx.array] = []
        lse: list[mx.array] = []
        is_top: list[mx.array] = []
        for rows in chunks(hidden.shape[0]):
            # This chunk's logits wait for the previous chunk's results (mx.depends): MLX frees a
            # chunk's logits before it builds the next chunk's, in one lazy evaluation.
            part = _after(hidden[rows], logps[-1:] + entropy[-1:] + lse[-1:])
            picked, ent, total, top = softmax_stats(logits_of(part, head), targets[rows])
            logps.append(picked)
            entropy.append(ent)
            lse.append(total)
            is_top.append(top)
        # The log-sum-exp is an output so that the backward's softmax is one exp, not two.
        return mx.concatenate(logps), mx.concatenate(entropy), mx.concatenate(lse), mx.concatenate(is_top)

    @logps_entropy.vjp
    def _vjp(primals, cotangents, outputs):
        hidden, head, targets = primals
        lse = outputs[2]
        cotangent = tempered(cotangents[0].astype(mx.float32), temperature)  # the top flags: metrics
        bonus = tempered(cotangents[1].astype(mx.float32), temperature) if entropy_grad else None
        d_hidden: list[mx.array] = []
        d_weight: mx.array | None = None  # the running sum over chunks (in place with ``in_place``)
        # Fewer positions than the hidden size: all the logits' gradients take less memory than one
        # more (vocabulary, hidden) part of the sum, so they are kept for one matmul at the end (the
        # 0.6B bench step's 256 positions: 155 MB against a 622 MB part). Not with ``in_place``,
        # where the sum has no second part: kept, they lived through the blocks' backward, and the
        # concatenation and the product were allocated last, into a heap fragmented by then
        # (prompt-heavy, 512 positions: 11,644 -> 11,221 MiB resident, 10,300 -> 10,721 MLX).
        whole = weight_grad and not in_place and hidden.shape[0] <= hidden.shape[1] and hidden.shape[0] > chunk
        kept: list[mx.array] = []
        for rows in chunks(hidden.shape[0]):
            # The next chunk waits for this one's results. With ``in_place`` (the fused head's
            # large chunks) not for the running sum: a second consumer would stop mx.addmm from
            # writing into its buffer (the 0.5B head's gradient on 1,024 positions 2.29 -> 1.53
            # GiB). With many small chunks (vocab_chunk_size) the sum's order matters more: there
            # they wait for it (2,048 positions in 64s: 1.54 GiB against 2.01).
            after = d_hidden[-1:] + ([d_weight] if d_weight is not None and not in_place else [])
            part = _after(hidden[rows], after)
            logits = logits_of(part, head)
            d_logits = logits_gradient(logits, lse[rows], targets[rows], cotangent[rows])
            if bonus is not None:
                d_logits = d_logits + entropy_gradient(logits, lse[rows], outputs[1][rows], bonus[rows])
            del logits
            d_logits = d_logits.astype(hidden.dtype)
            d_hidden.append(_project(d_logits, head, quantization, transpose=False))
            if whole:
                kept.append(d_logits)
            elif weight_grad and in_place and d_weight is not None:
                d_weight = mx.addmm(d_weight, d_logits.T.astype(mx.float32), part.astype(mx.float32))
            elif weight_grad:  # LoRA's frozen head needs none: skip its matmul
                term = (d_logits.T @ part).astype(mx.float32)
                d_weight = term if d_weight is None else d_weight + term
            if in_place and d_weight is not None:
                # MLX orders a graph from its outputs back: a running sum that nothing on the way to
                # the blocks' backward waits for ran after all of it, and each chunk's logits
                # gradient stayed alive until then. As an input of this chunk's hidden gradient it
                # runs with the chunk (the 0.5B step: 9,862 -> 9,469 MiB resident, bench/README.md).
                d_hidden[-1] = mx.depends(d_hidden[-1], d_weight)
        if whole:
            d_weight = (mx.concatenate(kept).T @ hidden).astype(mx.float32)
        return mx.concatenate(d_hidden), _head_gradient(head, d_weight), mx.zeros_like(targets)

    return logps_entropy


def logps_entropy(model: nn.Module, hidden: mx.array, targets: mx.array, temperature: float,
                  chunk: int, in_place: bool = False, entropy_grad: bool = False) -> TokenStats:
    """``TokenStats`` (B, T) of ``hidden`` (B, T, H) through the model's head on logits / temperature, ``chunk`` positions at a time (``in_place``: the plan's fused
    head, whose weight gradient's running sum is not an ordering input; ``entropy_grad``: the entropy
    is differentiated too, the entropy bonus)."""
    found = head_of(model)
    assert found is not None, "the plan enables vocab_chunk_size and fused_head only for supported heads"
    head, quantization = found
    rows, steps, width = hidden.shape
    weight_grad = quantization is None and head_trainable(model)  # a quantized head is frozen
    t = float(temperature)
    fn = _function(chunk, t, weight_grad, quantization, in_place, entropy_grad)
    logps, entropy, _, is_top = fn(hidden.reshape(rows * steps, width), head, targets.reshape(-1))
    entropy = entropy if entropy_grad else mx.stop_gradient(entropy)
    return TokenStats(logps.reshape(rows, steps), entropy.reshape(rows, steps),
                      mx.stop_gradient(is_top).reshape(rows, steps))


def head_trainable(model: nn.Module) -> bool:
    head = _head_module(model)
    return head is not None and "weight" in head.trainable_parameters()
