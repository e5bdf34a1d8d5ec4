"""One micro-batch's GRPO loss and its gradient, eager or compiled.

On a small model a step is thousands of tiny MLX ops whose dispatch and separate passes over memory
cost more than the arithmetic on CPU, so ``mx.compile`` traces the loss-and-gradient graph once and
replays it fused (docs/architecture.md, "Engine plan" says for which models). A trace needs stable
shapes: ``batch.pack`` rounds the shared-prompt widths up to multiples of ``batch.BUCKET``.
"""

from __future__ import annotations

import time
from typing import Any, Callable

import mlx.core as mx
import mlx.nn as nn

from grpo_tui.worker.engine.learning import batch as batch_layout
from grpo_tui.worker.engine.learning import tied_embedding
from grpo_tui.worker.engine.learning.batch import MicroBatch
from grpo_tui.worker.engine.learning.grpo import LossSettings, PartOf, policy_loss
from grpo_tui.worker.engine.learning.logps import lookup_ids, token_logps
from grpo_tui.worker.engine.models.plan import Head
from grpo_tui.worker.engine.learning.tied_embedding import LookupGradient

class LossFunctions:
    """The loss-and-gradient functions of one model, by everything their trace bakes in. Owned by
    whoever owns the model (the trainer), so that the traces live exactly as long as it."""

    def __init__(self) -> None:
        self._functions: dict[tuple, Callable[[dict[str, mx.array]], Any]] = {}
        self.traced_s = 0.0  # time in the first call of each function built (a compiled one traces then)

    def get(self, key: tuple, build: Callable[[], Callable]) -> Callable[[dict[str, mx.array]], Any]:
        if key not in self._functions:
            fn = build()
            self._functions[key] = self._timed_once(key, fn)
        return self._functions[key]

    def _timed_once(self, key: tuple, fn: Callable) -> Callable:
        def first(*args: Any) -> Any:
            began = time.perf_counter()
            try:
                return fn(*args)
            finally:
                self.traced_s += time.perf_counter() - began
                self._functions[key] = fn

        return first


def _micro_batch(arrays: dict[str, mx.array], start: int, group: int) -> MicroBatch:
    return MicroBatch(start=start, group=group, **{k: v for k, v in arrays.items() if k in batch_layout.ARRAY_FIELDS})


def _loss(model: nn.Module, settings: LossSettings, temperature: float, accumulation_steps: int, start: int,
          group: int, batch_rows: int | None, compiled: bool, head: Head, vocab_chunk: int) -> Callable:
    def loss_fn(arrays: dict[str, mx.array], embedding_offset: mx.array | None = None
                ) -> tuple[mx.array, mx.array, dict[str, mx.array]]:
        batch = _micro_batch(arrays, start, group)
        # A part of a micro-batch already has a stream to itself: no further split of its rows.
        logps, entropy, is_top = token_logps(model, batch, temperature, head, vocab_chunk,
                                             split_rows=batch_rows is None, embedding_offset=embedding_offset,
                                             entropy_grad=settings.entropy_bonus)
        old = batch.old_logps if batch.old_logps is not None else mx.stop_gradient(logps)
        part_of = None if batch_rows is None else PartOf(rows=batch_rows, tokens=arrays["batch_tokens"],
                                                         bonus_tokens=arrays.get("batch_bonus_tokens"))
        loss, metrics = policy_loss(
            logps, old, batch.advantages, batch.mask, settings, ref_logps=batch.ref_logps,
            num_items=arrays["num_items"], accumulation_steps=accumulation_steps, part_of=part_of,
            entropy_mask=batch.entropy_mask, entropy=entropy, entropy_coef=arrays.get("entropy_coef", 0.0),
            sampling_logps=batch.sampling_logps, sampling_known=batch.sampling_known,
        )
        tokens = mx.maximum(metrics["tokens"], 1.0)
        metrics["entropy"] = mx.sum(mx.stop_gradient(entropy) * batch.mask) / tokens
        # the completions' mean token NLL (perplexity = its exp) and the share of their tokens that
        # are the policy's most likely one (token accuracy), both on the loss's tokens
        metrics["nll"] = -mx.sum(mx.stop_gradient(logps) * batch.mask) / tokens
        metrics["token_accuracy"] = mx.sum(is_top * batch.mask) / tokens
        return loss, mx.stop_gradient(logps), metrics

    return loss_fn


def loss_grad_parts(model: nn.Module, batch: MicroBatch, settings: LossSettings, temperature: float, num_items: float,
                    accumulation_steps: int, *, compiled: bool, head: Head = Head.MLX, vocab_chunk: int = 0,
                    whole: MicroBatch | None = None, functions: LossFunctions | None = None,
                    entropy_coef: float = 0.0) -> tuple[Any, Any, LookupGradient | None]:
    """((loss, stop_gradient(logps), metrics), gradients, lookup gradient) of one micro-batch, or of a
    part of the micro-batch ``whole`` (normalised as a part of it), on the current default stream.
    ``head`` and ``vocab_chunk``: the plan's (``logps.token_logps``); a compiled trace runs MLX's
    head unless the memory switch's chunks are asked for (the numpy paths evaluate mid-graph, and
    the fused head is for eager losses). For a tied embedding (``tied_embedding``) the lookup's
    gradient comes apart: the gradients then hold the head's part alone, for
    ``tied_embedding.fold`` once they are evaluated. ``functions`` keeps the built functions
    between calls (a fresh set without it). ``entropy_coef``: the entropy bonus's coefficient this
    step (with ``settings.entropy_bonus``; an input of the trace, not baked in)."""
    if compiled and head is not Head.CHUNKED:
        head = Head.MLX
    arrays = batch_layout.arrays(batch)
    arrays["num_items"] = mx.array(num_items, dtype=mx.float32)
    if settings.entropy_bonus:
        arrays["entropy_coef"] = mx.array(entropy_coef, dtype=mx.float32)
    batch_rows = None
    if whole is not None:
        batch_rows = whole.targets.shape[0]
        arrays["batch_tokens"] = mx.sum(whole.mask)
        if settings.entropy_bonus and whole.entropy_mask is not None:
            arrays["batch_bonus_tokens"] = mx.sum(whole.mask * whole.entropy_mask)
    # Everything the trace bakes in (which arrays exist, Python values, the settings, the stream
    # its ops run on) is in the key.
    stream = str(mx.default_stream(mx.default_device()))
    key = (settings, temperature, tuple(sorted(arrays)), batch.start, batch.group, accumulation_steps, compiled, head,
           model.training, batch_rows, stream, vocab_chunk)
    tied = tied_embedding.applies(model)

    def build() -> Callable:
        loss = _loss(model, settings, temperature, accumulation_steps, batch.start, batch.group, batch_rows, compiled,
                     head, vocab_chunk)
        if tied:
            fn = tied_embedding.value_and_grad(
                model, loss, lambda arrays: lookup_ids(_micro_batch(arrays, batch.start, batch.group)))
        else:
            fn = nn.value_and_grad(model, loss)
        if compiled:
            # The parameters are inputs (current weights every call) and outputs (value_and_grad
            # swaps traced arrays into the model while tracing); so is the random state, or LoRA
            # dropout would replay the mask it drew while tracing on every step.
            state = [model.state, mx.random.state]
            fn = mx.compile(fn, inputs=state, outputs=state)
        return fn

    results = (functions or LossFunctions()).get(key, build)(arrays)  # (value, grads[, (ids, lookup)])
    if not tied:
        return results[0], results[1], None
    value, grads, (ids, gradient) = results
    return value, grads, LookupGradient(ids, gradient)

