"""The training phase: pack this rank's micro-batches (``micro_batches``), accumulate each one's
gradient, clip, guard against non-finite values and apply AdamW (a fused kernel per parameter)."""

from __future__ import annotations

import math

from contextlib import nullcontext
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

import mlx.core as mx
import mlx.nn as nn
import mlx.optimizers as optim
from mlx.utils import tree_flatten, tree_map, tree_unflatten

from grpo_tui.protocol.config import Config, GrpoConfig
from grpo_tui.worker.engine.learning import tied_embedding
from grpo_tui.worker.engine.accel import two_cores
from grpo_tui.worker.engine.learning.batch import MicroBatch, halves, pack, row_parts, with_sampling_logps
from grpo_tui.worker.engine.learning.grpo import DAPO_NORMALISED, EXTREMES, EntropyCoefficient, LossSettings, high_entropy_mask
from grpo_tui.worker.engine.learning.logps import token_logps
from grpo_tui.worker.engine.learning.loss import LossFunctions, loss_grad_parts
from grpo_tui.worker.engine.models.plan import EnginePlan

if TYPE_CHECKING:
    from grpo_tui.worker.engine.prompts.data import Example
    from grpo_tui.worker.engine.distributed import Ranks
    from grpo_tui.worker.engine.policy.rollout import Completion


@dataclass
class PassResult:
    """One optimiser update over the accumulated micro-batches."""

    loss: float
    grad_norm: float
    applied: bool
    skipped_reason: str | None
    stats: dict[str, float] = field(default_factory=dict)  # token-weighted means


def masked_out(grpo: GrpoConfig, finish: str) -> bool:
    """Whether a completion is left out of the loss (``mask_*_completions``)."""
    return (grpo.mask_truncated_completions and finish != "stop") or (
        grpo.mask_repetition_completions and finish == "repetition"
    )


def micro_batches(examples: list[Example], completions: list[Completion], advantages: list[float],
                  padding: list[bool] | None, config: Config, plan: EnginePlan, ranks: Ranks,
                  ref_model: nn.Module | None) -> list[MicroBatch]:
    """This rank's micro-batches of the step's completions (whole groups each), with the
    reference's log-probabilities when the loss has a KL term; ``padding`` (dynamic sampling) marks
    completions whose loss mask is zeroed."""
    G, steps = config.grpo.group_size, config.training.gradient_accumulation_steps
    per = len(examples) // steps * G  # completions per micro-batch (whole groups)
    batches = []
    for k in ranks.micro_batches(steps):  # this rank's share (distributed.py)
        part = completions[k * per : (k + 1) * per]
        pads = padding[k * per : (k + 1) * per] if padding is not None else [False] * len(part)
        keep = [not masked_out(config.grpo, c.finish_reason) and not pad for c, pad in zip(part, pads)]
        batch = pack(
            [examples[c.prompt_index].prompt_ids for c in part],
            [c.token_ids for c in part],
            advantages[k * per : (k + 1) * per],
            keep,
            group=plan.pack_group(G),
            token_masks=[c.mask for c in part],
        )
        if config.async_.on and config.async_.importance_sampling_correction:
            batch = with_sampling_logps(batch, [examples[c.prompt_index].prompt_ids for c in part],
                                        [c.sampling_logprobs if len(c.sampling_logprobs) == len(c.token_ids) else []
                                         for c in part])
        if ref_model is not None:
            # The reference is the policy's architecture without LoRA: the plan's head fits it.
            logps = token_logps(ref_model, batch, config.generation.temperature, plan.head, plan.vocab_chunk_size).logps
            batch.ref_logps = mx.stop_gradient(logps)
            mx.eval(batch.ref_logps)
        batches.append(batch)
    return batches


# AdamW as three single-output kernels, one per array it replaces: MLX writes a single-output
# kernel's result into its donated input's buffer (the old moment, the old parameter), while the one
# three-output kernel this was allocated three new arrays and more (5x a parameter's size above the
# step's state: the embedding's update was the switched 0.6B step's peak), and ran at half the speed.
@partial(mx.compile, shapeless=True)
def _first_moment(m, gradient, scale, b1: float):
    return b1 * m + (1 - b1) * (gradient * scale)


@partial(mx.compile, shapeless=True)
def _second_moment(v, gradient, scale, b2: float):
    return b2 * v + (1 - b2) * mx.square(gradient * scale)


@partial(mx.compile, shapeless=True)
def _adamw_step(parameter, m, v, lr, eps: float, decay: float):
    return parameter * (1 - lr * decay) - lr * m / (mx.sqrt(v) + eps)


class FusedAdamW(optim.AdamW):
    """mlx's AdamW (same state layout, same maths) with each parameter's update compiled into fused
    kernels that write in place (above), and the gradient-clipping scale folded in: on CPU, MLX
    runs every elementwise op as its own pass over memory (the weights' gradients must share their
    layout, see ``accel.patches.row_major_weight_grads``)."""

    grad_scale: mx.array = mx.array(1.0)
    _calls = 0

    def _next_stream(self) -> Any:
        """Alternate the parameters between the CPU streams: two kernels at a time."""
        streams = two_cores.streams()
        self._calls += 1
        return streams[self._calls % len(streams)]

    def update(self, model: nn.Module, gradients: dict) -> None:
        """``Optimizer.update``, one parameter at a time, each evaluated before the next: built all
        at once, MLX held every new parameter and moment beside the old ones until the end (the
        4-layer 0.6B step's update went from 3.3 to 6.6 GiB, bench/memory.py), which made the
        update the step's peak once the memory switches shrink the rest."""
        pairs = tree_flatten(gradients)
        if not self._initialized:
            self.init(tree_unflatten(pairs))
        for param, scheduler in self._schedulers.items():
            self.state[param] = scheduler(self.step)
        self.state["step"] = self.step + 1
        for name, gradient in pairs:
            keys = name.split(".")
            owner, state = _node(model, keys[:-1]), _node(self.state, keys)
            new = self.apply_single(gradient, owner[keys[-1]], state)
            owner[keys[-1]] = new  # the old parameter is free once evaluated
            mx.eval(new, state)

    def apply_single(self, gradient: mx.array, parameter: mx.array, state: dict) -> mx.array:
        if self.bias_correction:
            return super().apply_single(gradient * self.grad_scale.astype(gradient.dtype), parameter, state)
        dtype = gradient.dtype
        b1, b2 = self.betas
        scale = self.grad_scale.astype(dtype)
        with mx.stream(self._next_stream()):
            state["m"] = _first_moment(state["m"], gradient, scale, b1)
            state["v"] = _second_moment(state["v"], gradient, scale, b2)
            return _adamw_step(parameter, state["m"], state["v"], self.learning_rate.astype(dtype), self.eps,
                               self.weight_decay)


def _node(tree: Any, keys: list[str]) -> Any:
    """The node of a parameter tree (modules, dicts, lists) at ``tree_flatten``'s dotted keys."""
    for key in keys:
        tree = tree[int(key)] if isinstance(tree, list) else tree[key]
    return tree


def make_optimizer(config: Config) -> optim.Optimizer:
    training = config.training
    return FusedAdamW(learning_rate=training.learning_rate, weight_decay=training.weight_decay,
                      betas=[training.adam_beta1, training.adam_beta2], eps=training.adam_epsilon)


def _sum_of_squares(g: mx.array) -> mx.array:
    flat = g.reshape(-1).astype(mx.float32)
    return mx.inner(flat, flat)  # a BLAS dot product: one pass, unlike mx.sum(g ** 2)


def _global_norm(grads: Any) -> mx.array:
    return mx.sqrt(sum(_sum_of_squares(g) for _, g in tree_flatten(grads)))


def _accumulate(grads: Any, results: list) -> Any:
    """``grads`` plus each result's gradients (lazy; a helper so that no local keeps a part alive)."""
    for _, part_grads in results:
        grads = part_grads if grads is None else tree_map(mx.add, grads, part_grads)
    return grads


def _entropy_mask(model: nn.Module, batch: MicroBatch, pieces: list[MicroBatch], config: Config, plan: EnginePlan,
                  quantile: float) -> mx.array:
    """``top_entropy_quantile``'s mask of the whole micro-batch under the current weights (TRL
    recomputes it in every pass): a forward without gradient first, piece by piece as the loss
    runs, because the loss may see the micro-batch in parts (``two_cores``' halves,
    ``logprob_batch_size``) while the quantile is the whole micro-batch's."""
    entropies = []
    for piece in pieces:
        entropy = token_logps(model, piece, config.generation.temperature, plan.head, plan.vocab_chunk_size).entropy
        mx.eval(entropy)
        entropies.append(entropy)
    entropy = entropies[0] if len(entropies) == 1 else mx.concatenate(entropies)
    return high_entropy_mask(entropy, batch.mask, quantile)


def optimize_pass(
    model: nn.Module,
    optimizer: optim.Optimizer,
    batches: list[MicroBatch],
    config: Config,
    plan: EnginePlan,
    *,
    record_old: bool,
    functions: LossFunctions | None = None,
    ranks: Ranks | None = None,
    entropy_coef: EntropyCoefficient | None = None,
    num_items: float | None = None,
) -> PassResult:
    """Accumulate gradients over ``batches``, clip, and apply one AdamW update unless something is
    non-finite. ``record_old`` stores each batch's ``stop_gradient(logp)`` as its ``old_logps``
    (unless it has them: the sampling policy's, recorded when its generation was made).
    Which paths run is the ``plan``'s; ``functions`` keeps the loss functions between passes.
    ``ranks``: these are this rank's micro-batches; token counts, losses, statistics and gradients are
    summed over the ranks before the norm, so clipping and the NaN guard see the global values.
    ``entropy_coef``: the entropy bonus's coefficient (with ``grpo.entropy_coef`` or
    ``use_adaptive_entropy``; the config's when not given), updated after the pass (``bonus_stats``).
    ``num_items``: the tokens the batch-normalised losses divide by (default: the batch's, every
    rank's; a reused generation's per step, ``generation_reuse``)."""
    if num_items is None:
        num_items = sum(float(mx.sum(b.mask).item()) for b in batches)
        if ranks is not None:
            num_items = ranks.sum_floats([num_items])[0]  # dapo: the whole batch's active tokens
    settings = LossSettings.from_config(config)
    if entropy_coef is None and settings.entropy_bonus:
        entropy_coef = EntropyCoefficient.from_config(config)
    coef = entropy_coef.applied() if entropy_coef is not None else 0.0
    # The compiled loss is written for the shared-prompt layout, which the plan's batches have.
    compiled = plan.compiled_loss and all(b.prompts is not None for b in batches)
    accumulation = len(batches) * (ranks.size if ranks is not None else 1)  # every rank has an equal share
    parallel = plan.two_streams
    total_loss, grads = 0.0, None
    sums: dict[str, float] = {}
    quantile = config.grpo.top_entropy_quantile
    for batch in batches:
        # logprob_batch_size: one forward/backward per piece, each normalised as a part of the
        # whole micro-batch (grpo.PartOf), so the summed loss and gradient are the unsplit ones.
        pieces = row_parts(batch, plan.logprob_batch_size)
        if quantile < 1.0:
            batch.entropy_mask = _entropy_mask(model, batch, pieces, config, plan, quantile)
            pieces = row_parts(batch, plan.logprob_batch_size)
        values = []
        for piece in pieces:
            parts = halves(piece) if parallel else [piece]
            results, lookups = [], []
            for part, stream in zip(parts, two_cores.streams()):
                with mx.stream(stream):
                    value, part_grads, lookup = loss_grad_parts(
                        model, part, settings, config.generation.temperature, num_items, accumulation,
                        compiled=compiled, head=plan.head, vocab_chunk=plan.vocab_chunk_size,
                        whole=batch if len(parts) > 1 or len(pieces) > 1 else None, functions=functions,
                        entropy_coef=coef,
                    )
                results.append((value, part_grads))
                lookups += [lookup] if lookup is not None else []
            grads = _accumulate(grads, results)
            values += [value for value, _ in results]
            del results, value, part_grads  # the sum is evaluated with the parts: no second gradient tree stays alive
            with two_cores.half_the_blas_threads() if len(parts) > 1 else nullcontext():
                mx.eval(values[-len(parts):], grads, lookups)
            if lookups:  # a tied embedding: its lookup's rows go into the evaluated head gradient, in place
                grads = tied_embedding.fold(grads, lookups)
                mx.eval(grads)
        if record_old and batch.old_logps is None:
            batch.old_logps = mx.concatenate([logps for _, logps, _ in values])
        total_loss += _add_metrics(sums, values)
    if ranks is not None and ranks.size > 1:
        keys = sorted(sums)
        total_loss, *summed = ranks.sum_floats([total_loss] + [sums[k] for k in keys])
        sums = dict(zip(keys, summed))
        grads = ranks.sum_tree(grads)
    stats = pass_stats(sums)
    if entropy_coef is not None and settings.entropy_bonus:
        stats.update(bonus_stats(entropy_coef, stats, sums, settings, len(batches)))
    return _apply(model, optimizer, grads, total_loss, stats, config.training.max_grad_norm)


def _add_metrics(sums: dict[str, float], values: list) -> float:
    """One micro-batch's parts' metrics into ``sums`` (token-weighted; ``policy_loss`` summed as the
    loss is; each of ``EXTREMES`` the micro-batch's extreme, summed with its count in ``<name>#n``, so
    the ranks' sums give the mean over every micro-batch); returns the parts' summed loss."""
    total = 0.0
    extremes: dict[str, list[float]] = {}
    for loss, _, metrics in values:
        total += loss.item()
        tokens = metrics.pop("tokens").item()
        if "policy_loss" in metrics:
            sums["policy_loss"] = sums.get("policy_loss", 0.0) + metrics.pop("policy_loss").item()
        for k in EXTREMES:
            if k in metrics:
                extremes.setdefault(k, []).append(metrics.pop(k).item())
        for k, v in metrics.items():
            sums[k] = sums.get(k, 0.0) + v.item() * tokens
        sums["tokens"] = sums.get("tokens", 0.0) + tokens
    for k, found in extremes.items():
        # ±inf: no completion of the micro-batch had a loss token (TRL's NaN, left out of its mean);
        # the keys are set all the same, as every rank must sum the same keys
        value = EXTREMES[k](found)
        sums[k] = sums.get(k, 0.0) + (value if math.isfinite(value) else 0.0)
        sums[f"{k}#n"] = sums.get(f"{k}#n", 0.0) + math.isfinite(value)
    return total


def pass_stats(sums: dict[str, float]) -> dict[str, float]:
    """A pass's metrics from ``_add_metrics``' sums (every rank's): token means, and each of
    ``EXTREMES`` the mean over the micro-batches that had one."""
    stats = {k: v / max(sums["tokens"], 1.0) for k, v in sums.items()
             if k not in ("tokens", "policy_loss") and k.split("#")[0] not in EXTREMES}
    stats.update({k: sums[k] / sums[f"{k}#n"] for k in EXTREMES if sums.get(f"{k}#n")})
    return stats


def bonus_stats(entropy_coef: EntropyCoefficient, stats: dict[str, float], sums: dict[str, float],
                settings: LossSettings, micro_batches: int) -> dict[str, float]:
    """After a pass with the entropy bonus: the coefficient moved by the pass's mean entropy over
    every rank's tokens the bonus acted on, and what TRL logs, ``entropy_coef`` (after the move)
    and ``policy_loss``, the mean of each micro-batch's policy loss before TRL divides it for
    accumulation (DAPO's normalisation is not divided: the sum over a rank's micro-batches)."""
    entropy, counted = stats.pop("bonus_entropy", 0.0), stats.pop("bonus_tokens", 0.0)
    entropy_coef.update(entropy / counted if counted > 0 else 0.0)
    policy = sums.get("policy_loss", 0.0)
    if settings.loss_type in DAPO_NORMALISED:
        policy /= micro_batches
    return {"entropy_coef": entropy_coef.coef, "policy_loss": policy}


def _apply(model: nn.Module, optimizer: optim.Optimizer, grads: Any, total_loss: float, stats: dict[str, float],
           max_grad_norm: float) -> PassResult:
    """Clip the accumulated ``grads`` and apply one update, unless the loss or the norm is not finite."""
    norm = _global_norm(grads)
    mx.eval(norm)
    grad_norm = norm.item()
    finite = bool(mx.isfinite(mx.array(total_loss)).item()) and bool(mx.isfinite(norm).item())
    if not finite:
        what = "loss" if not bool(mx.isfinite(mx.array(total_loss)).item()) else "gradient norm"
        return PassResult(total_loss, grad_norm, False, f"non-finite {what}; update skipped", stats)
    scale = 1.0
    if max_grad_norm > 0 and grad_norm > max_grad_norm:
        scale = max_grad_norm / (grad_norm + 1e-6)
    if isinstance(optimizer, FusedAdamW):
        optimizer.grad_scale = mx.array(scale)  # applied inside the fused update
    elif scale != 1.0:
        grads = tree_map(lambda x: x * scale, grads)
    optimizer.update(model, grads)
    mx.eval(model.trainable_parameters(), optimizer.state)
    return PassResult(total_loss, grad_norm, True, None, stats)
