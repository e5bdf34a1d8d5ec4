"""A micro-batch of the training phase: the rollout packed into arrays, and its two halves.

Two layouts. The plain one holds right-padded prompt+completion sequences (padding after the text,
so a causal mask needs no attention mask). The shared-prompt one (``accel.shared_prompt``) holds
each group's prompt once, left-padded, and the completions alone.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import mlx.core as mx

from grpo_tui.worker.engine.accel import shared_prompt

# The shared-prompt widths are rounded up to a multiple of this, so that the compiled loss sees
# few distinct shapes (each new shape is one more trace).
BUCKET = 8


@dataclass
class MicroBatch:
    """Sliced to the completion region: ``targets[:, t]`` is predicted from position ``start + t``
    of ``inputs``. In the shared-prompt layout ``targets`` are the completions and ``inputs`` is
    unused."""

    inputs: mx.array  # (B, L) token ids, the last token dropped
    targets: mx.array  # (B, T) next tokens from position ``start`` on
    mask: mx.array  # (B, T) 1.0 on completion tokens that count in the loss
    advantages: mx.array  # (B,)
    old_logps: mx.array | None = None
    ref_logps: mx.array | None = None
    entropy_mask: mx.array | None = None  # (B, T) top_entropy_quantile's tokens (grpo.high_entropy_mask)
    prompts: mx.array | None = None  # (B / group, W), shared-prompt layout only
    prompt_pad: mx.array | None = None  # (B / group,)
    sampling_logps: mx.array | None = None  # (B, T) [async]: the sampler's log-probability of each target
    sampling_known: mx.array | None = None  # (B, T) 1 where the sampler's log-probability is known
    start: int = 0
    group: int = 1


# The field list, written once: every array field, and those with one entry per prompt group.
ARRAY_FIELDS = tuple(f.name for f in dataclasses.fields(MicroBatch) if f.name not in ("start", "group"))
GROUP_FIELDS = ("prompts", "prompt_pad")
ROW_FIELDS = tuple(name for name in ARRAY_FIELDS if name not in GROUP_FIELDS)


def arrays(batch: MicroBatch) -> dict[str, mx.array]:
    """The batch's arrays by field name, absent ones left out."""
    return {name: getattr(batch, name) for name in ARRAY_FIELDS if getattr(batch, name) is not None}


def pack(prompts: list[list[int]], completions: list[list[int]], advantages: list[float], keep: list[bool],
         group: int = 1, token_masks: list[list[int] | None] | None = None) -> MicroBatch:
    """Build a micro-batch; ``keep[i] = False`` zeroes sequence i's mask (mask_truncated_completions).
    With ``group`` > 1 and rows in runs of ``group`` sharing a prompt, the shared-prompt layout.
    ``token_masks[i]`` (agent rollouts): 0 on completion i's tool-result and template tokens, which
    stay in the sequence as context but count nowhere in the loss."""
    heads, shared = shared_prompt.group_prompts(prompts, group)
    if shared:
        batch = _pack_shared(heads, completions, advantages, keep, group)
        return _apply_token_masks(batch, completions, token_masks, [0] * len(completions))
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
    batch = MicroBatch(
        inputs=ids[:, :-1],
        targets=ids[:, start + 1 :],
        mask=mx.array(mask),
        advantages=mx.array(advantages, dtype=mx.float32),
        start=start,
    )
    return _apply_token_masks(batch, completions, token_masks, [len(p) - 1 - start for p in prompts])


def with_sampling_logps(batch: MicroBatch, prompts: list[list[int]], logprobs: list[list[float]]) -> MicroBatch:
    """``batch`` with the sampler's log-probability of each completion token ([async]'s correction),
    placed as the loss mask places the tokens; a completion without them (an agent's, TRL's
    rollout function without logprobs) is marked unknown and weighs 1."""
    width = batch.mask.shape[1]
    values = [[0.0] * width for _ in logprobs]
    known = [[0.0] * width for _ in logprobs]
    for i, row in enumerate(logprobs):
        off = 0 if batch.prompts is not None else len(prompts[i]) - 1 - batch.start
        for t, v in enumerate(row[: width - off]):
            values[i][off + t], known[i][off + t] = float(v), 1.0
    return dataclasses.replace(batch, sampling_logps=mx.array(values), sampling_known=mx.array(known))


def _apply_token_masks(batch: MicroBatch, completions: list[list[int]], token_masks: list[list[int] | None] | None,
                       offsets: list[int]) -> MicroBatch:
    """``batch`` with each row's completion-token mask multiplied by its ``token_masks`` entry;
    completion i starts at column ``offsets[i]`` of the mask."""
    if token_masks is None or all(m is None for m in token_masks):
        return batch
    width = batch.mask.shape[1]
    factor = []
    for c, m, off in zip(completions, token_masks, offsets):
        row = [1.0] * width
        if m is not None:
            for t, v in enumerate(m[: len(c)]):
                row[off + t] = float(v)
        factor.append(row)
    return dataclasses.replace(batch, mask=batch.mask * mx.array(factor))


def _bucket(n: int) -> int:
    return -(-n // BUCKET) * BUCKET


def _pack_shared(heads: list[list[int]], completions: list[list[int]], advantages: list[float], keep: list[bool],
                 group: int) -> MicroBatch:
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


def _part(batch: MicroBatch, rows: slice, prompts: slice | None = None, group: int | None = None) -> MicroBatch:
    sliced = {name: getattr(batch, name)[rows] for name in ROW_FIELDS if getattr(batch, name) is not None}
    if prompts is not None:
        sliced.update({name: getattr(batch, name)[prompts] for name in GROUP_FIELDS})
    return dataclasses.replace(batch, **sliced, group=batch.group if group is None else group)


def halves(batch: MicroBatch) -> list[MicroBatch]:
    """The micro-batch as two parts for the two CPU streams (``accel.two_cores``): whole prompt
    groups when there are two or more (no prompt runs twice), else the one group's completions
    split (its prompt then runs in both), else the batch itself."""
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


def row_parts(batch: MicroBatch, size: int) -> list[MicroBatch]:
    """The micro-batch as parts of at most ``size`` completions (``[training] logprob_batch_size``;
    0 or at least the batch: the batch itself). In the shared-prompt layout a part holds whole
    prompt groups when ``size`` allows, else a slice of one group's completions with its prompt
    (which then runs once per part)."""
    rows = batch.targets.shape[0]
    if size <= 0 or size >= rows:
        return [batch]
    if batch.prompts is None:
        return [_part(batch, slice(s, min(s + size, rows))) for s in range(0, rows, size)]
    group, groups = batch.group, batch.prompts.shape[0]
    if size >= group:
        per = size // group
        return [_part(batch, slice(g * group, min(g + per, groups) * group), slice(g, min(g + per, groups)))
                for g in range(0, groups, per)]
    return [_part(batch, slice(g * group + s, g * group + min(s + size, group)), slice(g, g + 1),
                  group=min(size, group - s))
            for g in range(groups) for s in range(0, group, size)]
