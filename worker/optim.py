"""The optimisation half of a step: pack the rollout, take log-probs, accumulate gradients, clip,
guard against non-finite values and apply AdamW.

Old log-probs (DESIGN §7): with ``num_iterations == 1`` the old policy *is* the current one, so the
loss uses ``stop_gradient(logp)`` from the same forward pass that gives the gradient (ρ = 1, no
extra forward). With ``num_iterations > 1`` the first pass over the rollout runs before any update,
so its ``stop_gradient(logp)`` are exactly the rollout policy's log-probs on logits / temperature;
they are kept and reused as ``old_logps`` by the later passes. (mlx-lm's sampling log-probs are on
the processed distribution, so they are not used for the ratio.)
"""

from __future__ import annotations

import dataclasses
from contextlib import nullcontext
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import mlx.core as mx
import mlx.nn as nn
import mlx.optimizers as optim
from mlx.utils import tree_flatten, tree_map

from grpo_tui.protocol.config import Config

from . import host_vocab, loss_step, shared_prompt, two_cores
from .llama_family import is_llama_family


@dataclass
class MicroBatch:
    """Right-padded prompt+completion sequences (padding after the text, so a causal mask needs no
    attention mask), sliced to the completion region: ``targets[:, t]`` is predicted from position
    ``start + t`` of ``inputs``."""

    inputs: mx.array  # (B, L) token ids, the last token dropped
    targets: mx.array  # (B, T) next tokens from position ``start`` on
    mask: mx.array  # (B, T) 1.0 on completion tokens that count in the loss
    advantages: mx.array  # (B,)
    start: int
    old_logps: mx.array | None = None
    ref_logps: mx.array | None = None
    # Shared-prompt layout (``shared_prompt``): each group's prompt once, left-padded, and the
    # completions alone; ``targets`` are then the completions and ``inputs`` is unused.
    prompts: mx.array | None = None  # (B / group, W)
    prompt_pad: mx.array | None = None  # (B / group,)
    group: int = 1


def pack(prompts: list[list[int]], completions: list[list[int]], advantages: list[float], keep: list[bool],
         group: int = 1) -> MicroBatch:
    """Build a micro-batch; ``keep[i] = False`` zeroes sequence i's mask (mask_truncated_completions).
    With ``group`` > 1 and rows in runs of ``group`` sharing a prompt, the shared-prompt layout."""
    heads, shared = shared_prompt.group_prompts(prompts, group)
    if shared:
        return _pack_shared(heads, completions, advantages, keep, group)
    seqs = [p + c for p, c in zip(prompts, completions)]
    length = max(len(s) for s in seqs)
    start = min(len(p) for p in prompts) - 1
    width = length - 1 - start
    tokens = [s + [0] * (length - len(s)) for s in seqs]
    mask = []
    for p, c, k in zip(prompts, completions, keep):
        row = [0.0] * width
        if k:
            for t in range(len(p) - 1 - start, len(p) - 1 - start + len(c)):
                row[t] = 1.0
        mask.append(row)
    ids = mx.array(tokens)
    return MicroBatch(
        inputs=ids[:, :-1],
        targets=ids[:, start + 1 :],
        mask=mx.array(mask),
        advantages=mx.array(advantages, dtype=mx.float32),
        start=start,
    )


def _bucket(n: int) -> int:
    return -(-n // loss_step.BUCKET) * loss_step.BUCKET


def _pack_shared(heads, completions, advantages, keep, group) -> MicroBatch:
    # Widths rounded up (loss_step.BUCKET) so that the compiled loss sees few distinct shapes.
    width = _bucket(max(len(p) for p in heads))
    steps = _bucket(max(len(c) for c in completions))
    targets = mx.array([c + [0] * (steps - len(c)) for c in completions])
    mask = [[1.0 if k and t < len(c) else 0.0 for t in range(steps)] for c, k in zip(completions, keep)]
    return MicroBatch(
        inputs=targets,
        targets=targets,
        mask=mx.array(mask),
        advantages=mx.array(advantages, dtype=mx.float32),
        start=0,
        prompts=mx.array([[0] * (width - len(p)) + p for p in heads]),
        prompt_pad=mx.array([width - len(p) for p in heads]),
        group=group,
    )


_ROW_FIELDS = ("inputs", "targets", "mask", "advantages", "old_logps", "ref_logps")


def _part(batch: MicroBatch, rows: slice, prompts: slice | None = None, group: int | None = None) -> MicroBatch:
    sliced = {name: getattr(batch, name)[rows] for name in _ROW_FIELDS if getattr(batch, name) is not None}
    if prompts is not None:
        sliced.update(prompts=batch.prompts[prompts], prompt_pad=batch.prompt_pad[prompts])
    return dataclasses.replace(batch, **sliced, group=batch.group if group is None else group)


def halves(batch: MicroBatch) -> list[MicroBatch]:
    """The micro-batch as two parts for the two CPU streams (``two_cores``): whole prompt groups
    when there are two or more (no prompt runs twice), else the one group's completions split
    (its prompt then runs in both), else the batch itself."""
    rows = batch.targets.shape[0]
    if batch.prompts is None:
        return [_part(batch, slice(0, rows // 2)), _part(batch, slice(rows // 2, rows))] if rows >= 2 else [batch]
    groups = batch.prompts.shape[0]
    if groups >= 2:
        cut = (groups + 1) // 2
        return [_part(batch, slice(0, cut * batch.group), slice(0, cut)),
                _part(batch, slice(cut * batch.group, rows), slice(cut, groups))]
    if batch.group >= 2:
        cut = batch.group // 2
        return [_part(batch, slice(0, cut), group=cut), _part(batch, slice(cut, rows), group=rows - cut)]
    return [batch]


def completion_logits(model: nn.Module, inputs: mx.array, start: int) -> mx.array:
    """``model(inputs)[:, start:]`` without projecting the earlier positions onto the vocabulary
    (most of a step's positions are prompt; the projection dominates with a 150k vocabulary)."""
    if is_llama_family(model):  # logits are lm_head(model.model(x)): skip the earlier positions
        return _head(model, model.model(inputs)[:, start:, :])
    return model(inputs)[:, start:, :]


def _head(model: nn.Module, hidden: mx.array) -> mx.array:
    if model.args.tie_word_embeddings:
        return model.model.embed_tokens.as_linear(hidden)
    return model.lm_head(hidden)


def batch_logits(model: nn.Module, batch: MicroBatch) -> mx.array:
    """(B, T, vocab) logits that predict ``batch.targets``."""
    if batch.prompts is not None:
        return _head(model, shared_prompt.hidden_states(model, batch.prompts, batch.prompt_pad, batch.group, batch.targets))
    return completion_logits(model, batch.inputs, batch.start)


def _logps_entropy(logits: mx.array, targets: mx.array) -> tuple[mx.array, mx.array]:
    # MLX's own fused reductions: on vocabulary-sized rows they beat cpu_fast's multi-pass exp.
    lse = mx.logsumexp(logits, axis=-1)
    probs = mx.softmax(logits, axis=-1)
    picked = mx.take_along_axis(logits, targets[..., None], axis=-1)[..., 0]
    entropy = mx.stop_gradient(lse - mx.sum(probs * logits, axis=-1))  # a metric: no gradient
    return picked - lse, entropy


def token_logps(model: nn.Module, batch: MicroBatch, temperature: float,
                split_rows: bool = True, host: bool = True) -> tuple[mx.array, mx.array]:
    """(log-probs of the targets, entropy) on logits / temperature, both (B, T).

    With ``host`` (eager graphs only) a large vocabulary's log-softmax runs in numpy
    (``host_vocab``: 0.6B-shaped micro-batch of 8 x 32 tokens, fwd+grad ~1.25 -> ~0.25 s). Else, with
    ``split_rows``, the vocabulary-wide reductions run on half the rows per CPU stream (forward
    1.65 -> 0.83 s, their gradient 0.96 -> 0.62 s)."""
    logits = batch_logits(model, batch).astype(mx.float32) / temperature
    if host and host_vocab.applies(logits):
        rows, steps, vocabulary = logits.shape
        logps, entropy = host_vocab.logps_entropy(logits.reshape(rows * steps, vocabulary), batch.targets.reshape(-1))
        return logps.reshape(rows, steps), mx.stop_gradient(entropy).reshape(rows, steps)
    streams = two_cores.streams()
    if not split_rows or len(streams) == 1 or logits.shape[0] < 2:
        return _logps_entropy(logits, batch.targets)
    half = logits.shape[0] // 2
    parts = []
    for stream, rows in zip(streams, (slice(0, half), slice(half, None))):
        with mx.stream(stream):
            parts.append(_logps_entropy(logits[rows], batch.targets[rows]))
    return mx.concatenate([parts[0][0], parts[1][0]]), mx.concatenate([parts[0][1], parts[1][1]])


@dataclass
class PassResult:
    """One optimiser update over the accumulated micro-batches."""

    loss: float
    grad_norm: float
    applied: bool
    skipped_reason: str | None
    stats: dict[str, float] = field(default_factory=dict)  # token-weighted means


@partial(mx.compile, shapeless=True)
def _adamw_kernel(parameter, gradient, m, v, lr, scale, b1: float, b2: float, eps: float, decay: float):
    gradient = gradient * scale
    m = b1 * m + (1 - b1) * gradient
    v = b2 * v + (1 - b2) * mx.square(gradient)
    parameter = parameter * (1 - lr * decay)
    return parameter - lr * m / (mx.sqrt(v) + eps), m, v


class FusedAdamW(optim.AdamW):
    """mlx's AdamW (same state layout, same maths) with each parameter's update compiled into one
    fused kernel, and the gradient-clipping scale folded in. On CPU, MLX runs every elementwise op
    as its own pass over memory: on 155M contiguous float32 weights, 2.5 CPU-s unfused, 1.2 fused
    (the weights' gradients must share their layout, see ``model.row_major_weight_grads``)."""

    grad_scale: mx.array = mx.array(1.0)
    _calls = 0

    def _next_stream(self) -> Any:
        """Alternate the parameters between the CPU streams: two kernels at a time (0.6B-shaped
        update: 4.6-6.5 -> 3.5 s wall)."""
        streams = two_cores.streams()
        self._calls += 1
        return streams[self._calls % len(streams)]

    def apply_single(self, gradient: mx.array, parameter: mx.array, state: dict) -> mx.array:
        if self.bias_correction:
            return super().apply_single(gradient * self.grad_scale.astype(gradient.dtype), parameter, state)
        dtype = gradient.dtype
        b1, b2 = self.betas
        with mx.stream(self._next_stream()):
            new, state["m"], state["v"] = _adamw_kernel(
                parameter, gradient, state["m"], state["v"], self.learning_rate.astype(dtype),
                self.grad_scale.astype(dtype), b1, b2, self.eps, self.weight_decay,
            )
        return new


def make_optimizer(config: Config) -> optim.Optimizer:
    return FusedAdamW(learning_rate=config.training.learning_rate, weight_decay=config.training.weight_decay)


def _sum_of_squares(g: mx.array) -> mx.array:
    flat = g.reshape(-1).astype(mx.float32)
    return mx.inner(flat, flat)  # a BLAS dot product: ~7x faster on CPU than mx.sum(g ** 2)


def _global_norm(grads: Any) -> mx.array:
    return mx.sqrt(sum(_sum_of_squares(g) for _, g in tree_flatten(grads)))


def optimize_pass(
    model: nn.Module,
    optimizer: optim.Optimizer,
    batches: list[MicroBatch],
    config: Config,
    *,
    record_old: bool,
) -> PassResult:
    """Accumulate gradients over ``batches``, clip, and apply one AdamW update unless something is
    non-finite. ``record_old`` stores each batch's ``stop_gradient(logp)`` as its ``old_logps``."""
    num_items = sum(float(mx.sum(b.mask).item()) for b in batches)

    compiled = loss_step.should_compile(model) and all(b.prompts is not None for b in batches)
    parallel = two_cores.applies(model)
    total_loss, grads = 0.0, None
    sums: dict[str, float] = {}
    for batch in batches:
        parts = halves(batch) if parallel else [batch]
        results = []
        for part, stream in zip(parts, two_cores.streams()):
            with mx.stream(stream):
                results.append(loss_step.loss_and_grad(
                    model, part, config, num_items, len(batches), compiled=compiled,
                    whole=batch if len(parts) > 1 else None,
                ))
        with two_cores.half_the_blas_threads() if len(parts) > 1 else nullcontext():
            mx.eval(results)
        if record_old:
            batch.old_logps = mx.concatenate([logps for (_, logps, _), _ in results])
        for (loss, _, metrics), part_grads in results:
            grads = part_grads if grads is None else tree_map(mx.add, grads, part_grads)
            total_loss += loss.item()
            tokens = metrics.pop("tokens").item()
            for k, v in metrics.items():
                sums[k] = sums.get(k, 0.0) + v.item() * tokens
            sums["tokens"] = sums.get("tokens", 0.0) + tokens
    stats = {k: v / max(sums["tokens"], 1.0) for k, v in sums.items() if k != "tokens"}

    norm = _global_norm(grads)
    mx.eval(norm)
    grad_norm = norm.item()
    finite = bool(mx.isfinite(mx.array(total_loss)).item()) and bool(mx.isfinite(norm).item())
    if not finite:
        what = "loss" if not bool(mx.isfinite(mx.array(total_loss)).item()) else "gradient norm"
        return PassResult(total_loss, grad_norm, False, f"non-finite {what}; update skipped", stats)
    scale = 1.0
    if config.training.max_grad_norm > 0 and grad_norm > config.training.max_grad_norm:
        scale = config.training.max_grad_norm / (grad_norm + 1e-6)
    if isinstance(optimizer, FusedAdamW):
        optimizer.grad_scale = mx.array(scale)  # applied inside the fused update
    elif scale != 1.0:
        grads = tree_map(lambda x: x * scale, grads)
    optimizer.update(model, grads)
    mx.eval(model.trainable_parameters(), optimizer.state)
    return PassResult(total_loss, grad_norm, True, None, stats)
