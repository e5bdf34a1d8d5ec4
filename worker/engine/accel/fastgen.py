"""A fixed-shape, compiled decode loop for GRPO rollouts of llama-family models.

A GRPO rollout is a special case of batched generation: every prompt is sampled ``n`` times and
all sequences start together. mlx-lm's continuous-batching ``BatchGenerator`` handles the general
case; this loop uses the special one:

- **one prefill per prompt**: the ``n`` completions of a prompt share its prompt, so the prompt is
  run once (``n``× less prefill work), and only its last position goes through the vocabulary
  head. With the x86 attention (``patches``) its KV cache is kept once and each decode step reads
  it once for the ``n`` rows (``SharedPromptCache``); elsewhere it is copied ``n`` times;
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

from typing import Any, Callable, NamedTuple, Sequence

import mlx.core as mx
import mlx.nn as nn

from grpo_tui.worker.engine.accel import cpu_fast, patches
from grpo_tui.worker.engine.accel.llama_family import MaskedCache, head_logits, is_llama_family, padded_causal_mask

BUCKET = 32  # the cache length is rounded up to a multiple, so nearby shapes reuse one trace


class StaticCache(MaskedCache):
    """One layer's KV cache as a fixed (rows, kv_heads, length, head_dim) buffer (mlx-lm cache API)."""

    def __init__(self, keys: mx.array, values: mx.array, offset: mx.array, mask: mx.array) -> None:
        super().__init__(offset, mask)
        self.keys, self.values = keys, values

    def update_and_fetch(self, keys: mx.array, values: mx.array) -> tuple[mx.array, mx.array]:
        self._write(keys, values, self.offset)
        return self.keys, self.values

    def _write(self, keys: mx.array, values: mx.array, slot: mx.array) -> None:
        if slot.ndim == 1:  # one write position per row (accel.rowgen): one token per row
            where = mx.broadcast_to(slot.astype(mx.int32)[:, None, None, None], keys.shape)
            self.keys = mx.put_along_axis(self.keys, where, keys.astype(self.keys.dtype), axis=2)
            self.values = mx.put_along_axis(self.values, where, values.astype(self.values.dtype), axis=2)
        else:
            self.keys = mx.slice_update(self.keys, keys.astype(self.keys.dtype), slot, axes=(2,))
            self.values = mx.slice_update(self.values, values.astype(self.values.dtype), slot, axes=(2,))


class SharedPromptCache(StaticCache):
    """One layer's cache as its prompts' keys/values (one row per prompt, written by the prefill)
    and each row's completion buffer (slot 0 at position ``width``). The x86 attention
    (``patches``) calls ``attend``, which reads a prompt's keys once for its n rows, where a
    repeated prompt cache is read n times per decode step. ``mask``: (rows, 1, L, prompt slots + completion slots)."""

    def __init__(self, prompt_keys: mx.array, prompt_values: mx.array, keys: mx.array, values: mx.array,
                 offset: mx.array, width: mx.array, mask: mx.array) -> None:
        super().__init__(keys, values, offset, mask)
        self.prompt_keys, self.prompt_values, self.width = prompt_keys, prompt_values, width

    def attend(self, queries: mx.array, keys: mx.array, values: mx.array, scale: float) -> mx.array:
        self._write(keys, values, self.offset - self.width)
        return cpu_fast.prefix_attention(queries, self.prompt_keys, self.prompt_values, self.keys, self.values,
                                         scale, self.mask)

    def update_and_fetch(self, keys: mx.array, values: mx.array) -> tuple[mx.array, mx.array]:
        # Any other attention: the prompt repeated in front of each row (correct, not fast).
        self._write(keys, values, self.offset - self.width)
        n = self.keys.shape[0] // self.prompt_keys.shape[0]
        return (mx.concatenate([mx.repeat(self.prompt_keys, n, axis=0), self.keys], axis=2),
                mx.concatenate([mx.repeat(self.prompt_values, n, axis=0), self.values], axis=2))


def shared_prompt_mask(left_pad: mx.array, width: mx.array, first: mx.array, queries: int, prompt_slots: int,
                       slots: int) -> mx.array:
    """``SharedPromptCache``'s mask: a query (at position first + i) sees its row's prompt
    positions that are not padding and the completion slots up to its own."""
    rows = left_pad.shape[0]
    k = mx.arange(prompt_slots)[None, None, None, :]
    prompt = (k >= left_pad[:, None, None, None]) & (k < width)
    own = (first.reshape(-1, 1) - width + mx.arange(queries)[None])[:, None, :, None]
    mine = mx.arange(slots)[None, None, None, :] <= own
    return mx.concatenate([mx.broadcast_to(prompt, (rows, 1, queries, prompt_slots)),
                           mx.broadcast_to(mine, (rows, 1, queries, slots))], axis=-1)


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
             kv: list[mx.array], prompt: list[mx.array] | None = None,
             width: mx.array | None = None) -> tuple[mx.array, list[mx.array]]:
    """Last-position logits for ``tokens`` written at ``offset`` (a scalar, or one position per
    row), and the updated cache buffers. With ``prompt`` (each layer's prompt keys and values, one
    row per prompt) ``kv`` holds the completion slots only, slot 0 at position ``width``."""
    if prompt:
        prompt_slots, slots = prompt[0].shape[2], kv[0].shape[2]
        mask = shared_prompt_mask(left_pad, width, offset, tokens.shape[1], prompt_slots, slots)
        caches: list[StaticCache] = [
            SharedPromptCache(prompt[2 * i], prompt[2 * i + 1], kv[2 * i], kv[2 * i + 1], offset, width, mask)
            for i in range(len(kv) // 2)
        ]
    else:
        mask = padded_causal_mask(left_pad, tokens.shape[1], offset, kv[0].shape[2])
        caches = [StaticCache(kv[2 * i], kv[2 * i + 1], offset, mask) for i in range(len(kv) // 2)]
    # The head on the last position only: a prefill's earlier positions need no logits.
    logits = head_logits(model, model.model(tokens, cache=caches)[:, -1:, :])[:, 0, :].astype(mx.float32)
    return logits, [a for c in caches for a in (c.keys, c.values)]


class DecodeStep:
    """A model's compiled decode step; every step of a rollout has the same shapes, so it is
    traced once. Kept by the trainer for as long as the model."""

    def __init__(self, model: nn.Module) -> None:
        layers = len(model.model.layers)

        def step(tokens, offset, left_pad, width, *arrays):
            prompt, kv = (arrays[: 2 * layers], arrays[2 * layers :]) if len(arrays) > 2 * layers else ((), arrays)
            logits, kv = _forward(model, tokens, offset, left_pad, list(kv), list(prompt), width)
            return (logits, *kv)

        # The parameters are implicit inputs, so the compiled step always reads the current weights.
        self.model = model
        self.step = mx.compile(step, inputs=model.state)

    def __call__(self, tokens: mx.array, offset: mx.array, left_pad: mx.array, *kv: mx.array,
                 prompt: Sequence[mx.array] = (), width: int = 0) -> tuple[mx.array, ...]:
        """(logits, the new ``kv``); ``prompt`` and ``width``: ``Prefilled``'s."""
        return self.step(tokens, offset, left_pad, mx.array(width), *prompt, *kv)


class Prefilled(NamedTuple):
    """A rollout's state after ``prefill``: what every decode step takes."""

    logits: mx.array  # (rows, vocab): each row's first draw
    kv: list[mx.array]  # each layer's keys and values: the whole length, or the completion slots
    prompt: list[mx.array]  # the shared-prompt layout's prompt keys and values (else empty)
    left_pad: mx.array  # (rows,)
    width: int  # the padded prompt width: the position of the first completion token
    length: int  # the positions a row can be written at


def _bucket(n: int) -> int:
    return -(-n // BUCKET) * BUCKET


def prefill(model: nn.Module, prompts: list[list[int]], n: int, max_tokens: int) -> Prefilled:
    """Each prompt run once, left-padded to the longest, its last logits copied to its ``n`` rows.
    Its cache is kept once per prompt beside each row's completion slots where the x86 attention
    runs (``SharedPromptCache``, ``n`` > 1), else copied to its ``n`` rows in one static cache with
    room for ``max_tokens`` more."""
    width = max(len(p) for p in prompts)
    shared = n > 1 and patches.is_patched(model)
    length = _bucket(width) if shared else _bucket(width + max_tokens)
    kv_heads, head_dim = _attention_shape(model)
    dtype = model.model.embed_tokens.weight.dtype
    if not mx.issubdtype(dtype, mx.floating):
        dtype = mx.float16

    pad = [width - len(p) for p in prompts]
    tokens = mx.array([[0] * k + p for k, p in zip(pad, prompts)])
    prompt_pad = mx.array(pad)
    buffers = 2 * len(model.model.layers)  # each layer's keys and values
    empty = mx.zeros((len(prompts), kv_heads, length, head_dim), dtype=dtype)
    logits, kv = _forward(model, tokens, mx.array(0), prompt_pad, [empty] * buffers)
    logits, left_pad = mx.repeat(logits, n, axis=0), mx.repeat(prompt_pad, n, axis=0)
    if not shared:
        return Prefilled(logits, [mx.repeat(a, n, axis=0) for a in kv], [], left_pad, width, length)
    slots = _bucket(max_tokens)
    own = [mx.zeros((len(prompts) * n, kv_heads, slots, head_dim), dtype=dtype) for _ in range(buffers)]
    return Prefilled(logits, own, kv, left_pad, width, width + slots)


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
    cache = prefill(model, prompts, n, max_tokens)
    logits, kv, left_pad, width = cache.logits, cache.kv, cache.left_pad, cache.width
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
            logits, *kv = decode(token[:, None], mx.array(width + t), left_pad, *kv, prompt=cache.prompt, width=width)
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
