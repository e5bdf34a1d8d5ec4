"""The training forward pass with each group's prompt computed once.

The G completions of a group share their prompt, and under a causal mask the prompt's hidden
states and keys/values do not depend on what follows. So the prompt rows run once per group
(left-padded to a common width), their per-layer keys/values are repeated G times, and only the
completion tokens run per row, attending to the repeated prompt cache. The gradient reaches the
prompt through the repeat (summed over the group), so values and gradients equal the plain pass;
the work drops from G·(prompt + completion) to prompt + G·completion tokens per group.

Works for the llama-family models whose attention goes through ``cache.offset``,
``cache.update_and_fetch`` and the first cache's ``make_mask`` (the same set as ``fastgen``).
"""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn

from grpo_tui.worker.engine.accel.llama_family import MaskedCache, is_llama_family, padded_causal_mask


def supports(model: nn.Module) -> bool:
    return is_llama_family(model)


class _PromptCache(MaskedCache):
    """Keeps the prompt's keys/values of one layer (offset 0)."""

    keeps_keys = True  # a side output: engine.checkpointing must not recompute the block (its gradient)

    def __init__(self, mask: mx.array) -> None:
        super().__init__(0, mask)
        self.keys = self.values = None

    def update_and_fetch(self, keys: mx.array, values: mx.array) -> tuple[mx.array, mx.array]:
        self.keys, self.values = keys, values
        return keys, values


class _PrefixCache(_PromptCache):
    """Completion tokens after a given (repeated) prompt cache."""

    keeps_keys = False

    def __init__(self, keys: mx.array, values: mx.array, offset: int, mask: mx.array) -> None:
        super().__init__(mask)
        self.prefix_keys, self.prefix_values, self.offset = keys, values, offset

    def update_and_fetch(self, keys: mx.array, values: mx.array) -> tuple[mx.array, mx.array]:
        return (mx.concatenate([self.prefix_keys, keys], axis=2),
                mx.concatenate([self.prefix_values, values], axis=2))


def lookup_ids(prompts: mx.array, completions: mx.array) -> mx.array:
    """The ids ``hidden_states`` embeds, flat: the prompts, then the completions but their last token."""
    return mx.concatenate([prompts.reshape(-1), completions[:, :-1].reshape(-1)])


def hidden_states(model: nn.Module, prompts: mx.array, prompt_pad: mx.array, group: int,
                  completions: mx.array, embedded: mx.array | None = None) -> mx.array:
    """(rows, T, hidden): the final hidden state that predicts each completion token.

    ``prompts`` (P, W) left-padded by ``prompt_pad`` (P,); ``completions`` (P·group, T) the
    completion tokens, right-padded; row r belongs to prompt r // group. ``embedded``: the
    embeddings of ``lookup_ids``, if looked up already."""
    body = model.model
    count, width = prompts.shape
    steps = completions.shape[1] - 1
    # One embedding lookup for both parts: each lookup's gradient is a dense vocabulary x hidden
    # matrix, so two lookups would cost a second one and a sum.
    if embedded is None:
        embedded = body.embed_tokens(lookup_ids(prompts, completions))
    embedded = embedded.reshape(-1, embedded.shape[-1])
    caches = [_PromptCache(padded_causal_mask(prompt_pad, width, 0, width)) for _ in body.layers]
    head = embedded[: count * width].reshape(count, width, -1)
    last = body(prompts, cache=caches, input_embeddings=head)[:, -1:, :]  # predicts completion token 0
    last = mx.repeat(last, group, axis=0)
    if steps == 0:
        return last
    pad = mx.repeat(prompt_pad, group, axis=0)
    mask = padded_causal_mask(pad, steps, width, width + steps)
    prefix = [
        _PrefixCache(mx.repeat(c.keys, group, axis=0), mx.repeat(c.values, group, axis=0), width, mask)
        for c in caches
    ]
    tail = embedded[count * width :].reshape(completions.shape[0], steps, -1)
    rest = body(completions[:, :-1], cache=prefix, input_embeddings=tail)
    return mx.concatenate([last, rest], axis=1)


def group_prompts(prompts: list[list[int]], group: int) -> tuple[list[list[int]], bool]:
    """The distinct prompt of each run of ``group`` rows, and whether the rows really come that way."""
    if group < 2 or len(prompts) % group:
        return [], False
    heads = prompts[::group]
    same = all(prompts[i] == heads[i // group] for i in range(len(prompts)))
    return heads, same
