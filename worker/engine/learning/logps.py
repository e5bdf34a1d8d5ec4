"""Log-probabilities of a micro-batch's completion tokens under the policy (logits / temperature).

Old log-probs (docs/architecture.md, "Step data path"): with ``num_iterations == 1`` the old policy
*is* the current one, so the loss uses ``stop_gradient(logp)`` from the same forward pass that gives
the gradient. With ``num_iterations > 1`` the first pass over the rollout runs before any update, so
its ``stop_gradient(logp)`` are exactly the rollout policy's log-probs; they are kept and reused as
``old_logps`` by the later passes. (mlx-lm's sampling log-probs are on the processed distribution,
so they are not used for the ratio.)
"""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn

from grpo_tui.worker.engine.learning import chunked_head, tied_embedding
from grpo_tui.worker.engine.accel import host_head, host_vocab, shared_prompt, two_cores
from grpo_tui.worker.engine.accel.llama_family import head_logits, is_llama_family
from grpo_tui.worker.engine.accel.temperature import tempered
from grpo_tui.worker.engine.learning.batch import MicroBatch
from grpo_tui.worker.engine.models.plan import Head
from grpo_tui.worker.engine.learning.token_stats import TokenStats


def completion_logits(model: nn.Module, inputs: mx.array, start: int, embedded: mx.array | None = None) -> mx.array:
    """``model(inputs)[:, start:]`` without projecting the earlier positions onto the vocabulary
    (most of a step's positions are prompt; the projection dominates with a large vocabulary).
    ``embedded``: the inputs' embeddings, looked up already (llama family)."""
    if is_llama_family(model):  # logits are lm_head(model.model(x)): skip the earlier positions
        return head_logits(model, model.model(inputs, input_embeddings=embedded)[:, start:, :])
    return model(inputs)[:, start:, :]


def lookup_ids(batch: MicroBatch) -> mx.array:
    """The token ids that the forward pass embeds, in its lookup's order (one lookup per pass)."""
    if batch.prompts is not None:
        return shared_prompt.lookup_ids(batch.prompts, batch.targets)
    return batch.inputs


def _embedded(model: nn.Module, batch: MicroBatch, offset: mx.array | None) -> mx.array | None:
    # The lookup's offset: tied_embedding's (its gradient is the lookup's); none, mlx-lm's own lookup.
    return None if offset is None else tied_embedding.lookup(model, lookup_ids(batch), offset)


def batch_hidden(model: nn.Module, batch: MicroBatch, offset: mx.array | None = None) -> mx.array:
    """(B, T, hidden) final hidden states that predict ``batch.targets`` (llama family)."""
    embedded = _embedded(model, batch, offset)
    if batch.prompts is not None:
        return shared_prompt.hidden_states(model, batch.prompts, batch.prompt_pad, batch.group, batch.targets,
                                           embedded)
    return model.model(batch.inputs, input_embeddings=embedded)[:, batch.start:, :]


def batch_logits(model: nn.Module, batch: MicroBatch, offset: mx.array | None = None) -> mx.array:
    """(B, T, vocab) logits that predict ``batch.targets``."""
    if batch.prompts is not None:
        return head_logits(model, batch_hidden(model, batch, offset))
    return completion_logits(model, batch.inputs, batch.start, _embedded(model, batch, offset))


def _logps_entropy(logits: mx.array, targets: mx.array, entropy_grad: bool = False) -> TokenStats:
    # MLX's own fused reductions: on vocabulary-sized rows they beat cpu_fast's multi-pass exp.
    lse = mx.logsumexp(logits, axis=-1)
    probs = mx.softmax(logits, axis=-1)
    picked = mx.take_along_axis(logits, targets[..., None], axis=-1)[..., 0]
    entropy = lse - mx.sum(probs * logits, axis=-1)
    if not entropy_grad:
        entropy = mx.stop_gradient(entropy)  # a metric: no gradient
    is_top = mx.stop_gradient(picked >= mx.max(logits, axis=-1)).astype(mx.float32)
    return TokenStats(picked - lse, entropy, is_top)


def token_logps(model: nn.Module, batch: MicroBatch, temperature: float, head: Head = Head.MLX,
                vocab_chunk: int = 0, split_rows: bool = True,
                embedding_offset: mx.array | None = None, entropy_grad: bool = False) -> TokenStats:
    """``TokenStats`` of the targets (log-probs, entropy, top flags) on logits / temperature, (B, T)
    each, with the plan's
    ``head`` (eager graphs only, but ``MLX``): ``CHUNKED`` runs ``chunked_head``'s way,
    ``vocab_chunk`` positions at a time (MLX's log-softmax, lazily); ``FUSED`` the same custom
    function, ``fused_chunk`` positions at a time, one vocabulary-wide exp forward and one
    backward; ``HOST_HEAD`` the plain head and the log-softmax in numpy a block of vocabulary at a
    time (``accel.host_head``: the logits never exist whole); ``HOST_VOCAB`` the log-softmax alone
    in numpy (float32 logits, ``accel.host_vocab``'s chunks of positions) when they fit its buffer.
    Else, with ``split_rows``, the vocabulary-wide reductions run on half the rows per CPU stream.
    ``embedding_offset``: ``tied_embedding``'s lookup offset. ``entropy_grad``: the entropy is
    differentiated too (the entropy bonus), on every head path; else it is a metric, no gradient."""
    if head in (Head.CHUNKED, Head.FUSED):
        chunk = vocab_chunk if head is Head.CHUNKED else chunked_head.fused_chunk(int(model.args.vocab_size))
        return chunked_head.logps_entropy(model, batch_hidden(model, batch, embedding_offset), batch.targets, temperature,
                                          chunk, in_place=head is Head.FUSED, entropy_grad=entropy_grad)
    if head is Head.HOST_HEAD:
        weight = chunked_head.plain_weight(model)
        assert weight is not None, "the plan picks the host head only for a plain head"
        return TokenStats(*host_head.logps_entropy(batch_hidden(model, batch, embedding_offset), weight, batch.targets,
                                                   temperature, chunked_head.head_trainable(model), entropy_grad))
    logits = tempered(batch_logits(model, batch, embedding_offset).astype(mx.float32), temperature)
    if head is Head.HOST_VOCAB and host_vocab.fits(logits):
        rows, steps, vocabulary = logits.shape
        fn = host_vocab.logps_entropy_grad if entropy_grad else host_vocab.logps_entropy
        logps, entropy, is_top = fn(logits.reshape(rows * steps, vocabulary), batch.targets.reshape(-1))
        entropy = entropy if entropy_grad else mx.stop_gradient(entropy)
        return TokenStats(logps.reshape(rows, steps), entropy.reshape(rows, steps),
                          mx.stop_gradient(is_top).reshape(rows, steps))
    streams = two_cores.streams()
    if not split_rows or len(streams) == 1 or logits.shape[0] < 2:
        return _logps_entropy(logits, batch.targets, entropy_grad)
    half = logits.shape[0] // 2
    parts = []
    for stream, rows in zip(streams, (slice(0, half), slice(half, None))):
        with mx.stream(stream):
            parts.append(_logps_entropy(logits[rows], batch.targets[rows], entropy_grad))
    return TokenStats(*(mx.concatenate([a, b]) for a, b in zip(*parts)))
