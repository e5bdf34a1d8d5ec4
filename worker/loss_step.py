"""One micro-batch's GRPO loss and its gradient, eager or compiled.

On a small model a step is thousands of tiny MLX ops, and on CPU their dispatch and separate passes
over memory cost more than the arithmetic: ``mx.compile`` traces the loss-and-gradient graph once,
fuses the elementwise chains and replays it (demo model, 64 completions: fwd+bwd ~120 -> ~85 ms).
It needs stable shapes, so ``optim.pack`` rounds the shared-prompt layout's widths up to multiples
of ``BUCKET``; a new shape is one more trace (~0.1 s; the first ever on a machine also compiles the
fused kernels, ~10 s, cached by MLX on disk). Models over ``COMPILE_MAX_PARAMETERS`` stay eager:
their step is matmul-bound and a trace of every layer costs more than it saves.
"""

from __future__ import annotations

from typing import Any, Callable

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten

from grpo_tui.protocol.config import Config

from .grpo import policy_loss

COMPILE_MAX_PARAMETERS = 50_000_000
BUCKET = 8

_FIELDS = ("inputs", "targets", "mask", "advantages", "old_logps", "ref_logps", "prompts", "prompt_pad")


def _loss(model: nn.Module, config: Config, accumulation_steps: int, start: int, group: int,
          batch_rows: int | None, compiled: bool) -> Callable:
    from .optim import MicroBatch, token_logps  # optim imports this module

    g = config.grpo

    def loss_fn(arrays: dict[str, mx.array]) -> tuple[mx.array, mx.array, dict[str, mx.array]]:
        batch = MicroBatch(start=start, group=group, **{k: v for k, v in arrays.items() if k in _FIELDS})
        # A part of a micro-batch already has a stream to itself: no further split of its rows.
        # A trace cannot hand the vocabulary to numpy (host_vocab evaluates mid-graph).
        logps, entropy = token_logps(model, batch, config.generation.temperature, split_rows=batch_rows is None,
                                     host=not compiled)
        old = batch.old_logps if batch.old_logps is not None else mx.stop_gradient(logps)
        loss, metrics = policy_loss(
            logps,
            old,
            batch.advantages,
            batch.mask,
            loss_type=g.loss_type,
            epsilon=g.epsilon,
            epsilon_high=float(g.epsilon_high if g.epsilon_high is not None else g.epsilon),
            beta=g.beta,
            ref_logps=batch.ref_logps,
            importance_sampling_level=g.importance_sampling_level,
            max_completion_length=config.generation.max_completion_length,
            num_items=arrays["num_items"],
            accumulation_steps=accumulation_steps,
            batch_rows=batch_rows,
            batch_tokens=arrays.get("batch_tokens"),
        )
        metrics["entropy"] = mx.sum(mx.stop_gradient(entropy) * batch.mask) / mx.maximum(metrics["tokens"], 1.0)
        return loss, mx.stop_gradient(logps), metrics

    return loss_fn


def should_compile(model: nn.Module) -> bool:
    count = sum(v.size for _, v in tree_flatten(model.parameters()))
    return count <= COMPILE_MAX_PARAMETERS


def loss_and_grad(model: nn.Module, batch: Any, config: Config, num_items: float, accumulation_steps: int,
                  *, compiled: bool, whole: Any = None) -> tuple[tuple[mx.array, mx.array, dict[str, mx.array]], Any]:
    """((loss, stop_gradient(logps), metrics), gradients) of one micro-batch, or of a part of the
    micro-batch ``whole`` (normalised as a part of it). Runs on the current default stream."""
    arrays = {name: getattr(batch, name) for name in _FIELDS if getattr(batch, name) is not None}
    arrays["num_items"] = mx.array(num_items, dtype=mx.float32)
    batch_rows = None
    if whole is not None:
        batch_rows = whole.targets.shape[0]
        arrays["batch_tokens"] = mx.sum(whole.mask)
    # Everything the trace bakes in (which arrays exist, Python ints, the config, the stream its
    # ops run on) is in the key.
    stream = str(mx.default_stream(mx.default_device()))
    key = (id(config), tuple(sorted(arrays)), batch.start, batch.group, accumulation_steps, compiled, model.training,
           batch_rows, stream)
    cache = model.__dict__.setdefault("_grpo_tui_loss_fns", {})  # dies with the model
    if key not in cache:
        fn = nn.value_and_grad(model, _loss(model, config, accumulation_steps, batch.start, batch.group, batch_rows, compiled))
        if compiled:
            # The parameters are inputs (current weights every call) and outputs (value_and_grad
            # swaps traced arrays into the model while tracing); so is the random state, or LoRA
            # dropout would replay the mask it drew while tracing on every step.
            state = [model.state, mx.random.state]
            fn = mx.compile(fn, inputs=state, outputs=state)
        cache[key] = fn
    return cache[key](arrays)
