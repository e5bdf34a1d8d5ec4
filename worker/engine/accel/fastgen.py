"""A fixed-shape, compiled decode loop for GRPO rollouts of llama-family models.

A GRPO rollout is a special case of batched generation: every prompt is sampled ``n`` times and
all sequences start together. mlx-lm's continuous-batching ``BatchGenerator`` handles the general
case; this loop uses the special one:

- **one prefill per prompt**: the ``n`` completions of a prompt share its prompt, so the prompt is
  run once and its KV cache copied ``n`` times (``n``× less prefill work), and only its last
  position goes through the vocabulary head;
- **a static KV cache**: every row's keys/values live in one preallocated buffer of the final
  length, written at the current position (``mx.slice_update``), so every decode step has the same shapes and
  its graph is traced and compiled once (``mx.compile``) instead of rebuilt op by op in Python;
- **pipelined**: step t+1 is queued (``mx.async_eval``) before step t's tokens are read back.

Prompts are left-padded to a common length; padded key positions are masked out, and RoPE only
sees position differences, so a row's attention is the same as without padding.

``supports`` says when the loop applies (plain llama-family attention, no logits processors);
the plan's ``fast_rollout`` decides, and ``rollout.generate`` uses ``BatchGenerator`` otherwise.
"""

from __future__ import annotations

from typing import Any, Callable

import mlx.core as mx
import mlx.nn as nn

from . import cpu_fast
from .llama_family import MaskedCache, head_logits, is_llama_family, padded_causal_mask

BUCKET = 32  # the cache length is rounded up to a multiple, so nearby shapes reuse one trace


class StaticCache(MaskedCache):
    """One layer's KV cache as a fixed (rows, kv_heads, length, head_dim) buffer (mlx-lm cache API)."""

    def __init__(self, keys: mx.array, values: mx.array, offset: mx.array, mask: mx.array) -> None:
        super().__init__(offset, mask)
        self.keys, self.values = keys, values

    def update_and_fetch(self, keys: mx.array, values: mx.array) -> tuple[mx.array, mx.array]:
        if self.offset.ndim == 1:  # one write position per row (accel.rowgen): one token per row
            where = mx.broadcast_to(self.offset.astype(mx.int32)[:, None, None, None], keys.shape)
            self.keys = mx.put_along_axis(self.keys, where, keys.astype(self.keys.dtype), axis=2)
            self.values = mx.put_along_axis(self.values, where, values.astype(self.values.dtype), axis=2)
        else:
            self.keys = mx.slice_update(self.keys, keys.astype(self.keys.dtype), self.offset, axes=(2,))
            self.values = mx.slice_update(self.values, values.astype(self.values.dtype), self.offset, axes=(2,))
        return self.keys, self.values


def supports(model: nn.Module, repetition_penalty: float) -> bool:
    args = getattr(model, "args", None)
    return (
        is_llama_family(model)
        and getattr(model.model, "layers", None) is not None
        and repetition_penalty == 1.0
        and getattr(args, "sliding_window", None) in (None, 0)
        and not getattr(args, "use_sliding_window", False)
    )


def _attention_shape(model: nn.Module) -> tuple[int, int]:
    attn = model.model.layers[0].self_attn
    kv_heads = getattr(attn, "n_kv_heads", None) or model.args.num_key_value_heads
    head_dim = getattr(model.args, "head_dim", None) or model.args.hidden_size // model.args.num_attention_heads
    return kv_heads, head_dim


def _forward(model: nn.Module, tokens: mx.array, offset: mx.array, left_pad: mx.array,
             kv: list[mx.array]) -> tuple[mx.array, list[mx.array]]:
    """Last-position logits for ``tokens`` written at ``offset`` (a scalar, or one position per
    row), and the updated cache buffers."""
    length = kv[0].shape[2]
    mask = padded_causal_mask(left_pad, tokens.shape[1], offset, length)
    caches = [StaticCache(kv[2 * i], kv[2 * i + 1], offset, mask) for i in range(len(kv) // 2)]
    # The head on the last position only: a prefill's earlier positions need no logits.
    logits = head_logits(model, model.model(tokens, cache=caches)[:, -1:, :])[:, 0, :].astype(mx.float32)
    return logits, [a for c in caches for a in (c.keys, c.values)]


class DecodeStep:
    """A model's compiled decode step; every step of a rollout has the same shapes, so it is
    traced once. Kept by the trainer for as long as the model."""

    def __init__(self, model: nn.Module) -> None:
        def step(tokens, offset, left_pad, *kv):
            logits, kv = _forward(model, tokens, offset, left_pad, list(kv))
            return (logits, *kv)

        # The parameters are implicit inputs, so the compiled step always reads the current weights.
        self.model = model
        self.step = mx.compile(step, inputs=model.state)

    def __call__(self, *args: mx.array) -> tuple[mx.array, ...]:
        return self.step(*args)


def prefill(model: nn.Module, prompts: list[list[int]], n: int,
            max_tokens: int) -> tuple[mx.array, list[mx.array], mx.array, int]:
    """Each prompt run once, left-padded to the longest, into a static cache with room for
    ``max_tokens`` more; its cache and last logits copied to its ``n`` rows: (logits, cache
    buffers, each row's left padding, the padded prompt width)."""
    width = max(len(p) for p in prompts)
    length = -(-(width + max_tokens) // BUCKET) * BUCKET
    kv_heads, head_dim = _attention_shape(model)
    dtype = model.model.embed_tokens.weight.dtype
    if not mx.issubdtype(dtype, mx.floating):
        dtype = mx.float16

    pad = [width - len(p) for p in prompts]
    tokens = mx.array([[0] * k + p for k, p in zip(pad, prompts)])
    prompt_pad = mx.array(pad)
    empty = mx.zeros((len(prompts), kv_heads, length, head_dim), dtype=dtype)
    logits, kv = _forward(model, tokens, mx.array(0), prompt_pad, [empty] * (2 * len(model.model.layers)))
    kv = [mx.repeat(a, n, axis=0) for a in kv]
    return mx.repeat(logits, n, axis=0), kv, mx.repeat(prompt_pad, n, axis=0), width


def generate_tokens(
    model: nn.Module,
    prompts: list[list[int]],
    n: int,
    max_tokens: int,
    stop_ids: set[int],
    sampler: Callable[[mx.array], mx.array],
    *,
    logprobs: bool = False,
    normalized: bool = True,
    fast_exp: bool = False,
    decode: DecodeStep | None = None,
    row_stops: Any = None,
) -> tuple[list[list[int]], list[bool], list[list[float]]]:
    """``n`` completions per prompt, row ``i * n + j``: (token ids with the stop token, stopped,
    sampled tokens' log-probs when ``logprobs``). ``normalized=False`` hands the sampler raw logits
    (fine for greedy and plain temperature sampling, which ignore a constant shift) and saves a
    vocabulary-wide logsumexp per token (a sampler with ``on_host`` set, ``sampling.KeyedSampler``
    on the plan's ``host_sampling``, takes raw logits and gives the log-probs itself; it returns
    evaluated tokens, so the next step is queued after the draw). ``fast_exp``: the plan's ``cpu_kernels``. ``decode``: the
    model's compiled step, kept between rollouts (a fresh one without it). ``row_stops``: the
    early-stop rules (``engine.stopping.RowStops``: ``push(row, token)`` answers a reason to end the
    row, or None); a row they end is not ``stopped`` and has no stop token."""
    rows = len(prompts) * n
    logits, kv, left_pad, width = prefill(model, prompts, n, max_tokens)
    decode = decode if decode is not None and decode.model is model else DecodeStep(model)

    # sampling.KeyedSampler's numpy draw: raw logits in, the log-probs out
    host_draw = getattr(sampler, "sample_logits", None) if getattr(sampler, "on_host", False) else None

    def sample(logits: mx.array) -> tuple[mx.array, mx.array]:
        if host_draw is not None:
            token, host_picked = host_draw(logits, logprobs)
            return token, host_picked if host_picked is not None else token
        if not (normalized or logprobs):
            token = sampler(logits)
            return token, token
        lse = cpu_fast.logsumexp(logits) if fast_exp else mx.logsumexp(logits, axis=-1)
        lps = logits - lse[:, None]
        token = sampler(lps)
        picked = mx.take_along_axis(lps, token[:, None], axis=-1)[:, 0] if logprobs else token
        return token, picked

    token, picked = sample(logits)
    mx.async_eval(token, picked)
    out: list[list[int]] = [[] for _ in range(rows)]
    lps: list[list[float]] = [[] for _ in range(rows)]
    stopped = [False] * rows
    ended = [False] * rows  # stopped, or ended early by a rule
    for t in range(max_tokens):
        if t + 1 < max_tokens:
            logits, *kv = decode(token[:, None], mx.array(width + t), left_pad, *kv)
            next_token, next_picked = sample(logits)
            mx.async_eval(next_token, next_picked)
        ids = token.tolist()
        values = picked.tolist() if logprobs else None
        for i, tok in enumerate(ids):
            if ended[i]:
                continue
            out[i].append(tok)
            if values is not None:
                lps[i].append(values[i])
            if tok in stop_ids:
                stopped[i] = ended[i] = True
            elif row_stops is not None and row_stops.push(i, tok):
                ended[i] = True
        if all(ended) or t + 1 == max_tokens:
            break
        token, picked = next_token, next_picked
    return out, stopped, lps
