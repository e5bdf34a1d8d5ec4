"""``[training] memory_limit_gb``: pick the memory switches whose estimated step fits (docs/config.md,
"Memory").

The estimate is a simple model of a training step's peak, from the parameter count, the vocabulary,
the layer shape and the batch: weights, gradients and AdamW's two moments (and a reference copy
when ``beta > 0``), the activations the backward pass keeps (all blocks', or with gradient
checkpointing each block's input and one block's), the logits (a few (positions, vocabulary) float32
copies, or one chunk's) and a fixed allowance for the process itself. Its per-token activation
constant was fitted to ``bench/memory.py``'s measurements of the Qwen3-0.6B shape; it errs high.
Candidates go from the fastest to the most frugal, and the first that fits is taken; switches the
user set stay on.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import mlx.nn as nn
from mlx.utils import tree_flatten

from grpo_tui.protocol.config import Config, ConfigError, TrainingConfig

GB = 1e9
# Stored activations per token and block, in units of (hidden, intermediate, heads × sequence) values:
# norms, q/k/v/o, the SwiGLU inputs and output, the attention weights (fitted, see above).
HIDDEN_TERMS, INTERMEDIATE_TERMS, ATTENTION_TERMS = 10, 4, 2
LOGIT_COPIES = 4  # logits, softmax and their cotangents alive at once in the unchunked backward

PROCESS_BYTES = 1.0 * GB  # interpreter, MLX, BLAS, tokenizer, rollout cache, host buffers
# chunked_head.FUSED_CHUNK_BYTES (not imported: this module's estimate runs without the model's
# MLX kernels), and the chunks MLX's queue holds at once (chunked_head: about two, and the running one)
FUSED_CHUNK_BYTES = 58 * 2**20
FUSED_IN_FLIGHT = 3


@dataclass(frozen=True)
class Choice:
    gradient_checkpointing: bool
    vocab_chunk_size: int
    logprob_batch_size: int
    estimate_gb: float

    def describe(self, limit: float) -> str:
        on = [name for name, value in (("gradient_checkpointing", self.gradient_checkpointing),
                                       ("vocab_chunk_size", self.vocab_chunk_size),
                                       ("logprob_batch_size", self.logprob_batch_size)) if value]
        picked = ", ".join(f"{name} = {str(getattr(self, name)).lower()}" for name in on) or "no memory switch"
        return f"memory_limit_gb = {limit:g}: {picked} (a step is estimated at {self.estimate_gb:.1f} GB)"


@dataclass(frozen=True)
class StepShape:
    parameters: int
    trainable: int
    bytes_per_value: int
    vocabulary: int
    hidden: int
    intermediate: int
    heads: int
    layers: int
    rows: int  # completions per micro-batch
    group: int
    prompt_tokens: int  # the longest prompt
    completion_tokens: int
    reference: bool
    extra_bytes: int = 0  # what else stays in memory all run long: judge models' weights
    fused_head: bool = False  # the plan's fused head: the unchunked step holds a few chunks' logits, not all

    @classmethod
    def of(cls, model: nn.Module, config: Config, prompt_tokens: int, extra_bytes: int = 0,
           fused_head: bool = False) -> "StepShape":
        args = model.args
        params = tree_flatten(model.parameters())
        trainable = sum(v.size for _, v in tree_flatten(model.trainable_parameters()))
        g, t = config.grpo, config.training
        return cls(
            parameters=sum(v.size for _, v in params),
            trainable=trainable,
            bytes_per_value=max((v.itemsize for _, v in params), default=4),
            vocabulary=int(args.vocab_size),
            hidden=int(args.hidden_size),
            intermediate=int(getattr(args, "intermediate_size", 4 * args.hidden_size)),
            heads=int(getattr(args, "num_attention_heads", 1)),
            layers=len(model.model.layers),
            rows=t.batch_size // t.gradient_accumulation_steps * g.group_size,
            group=g.group_size,
            prompt_tokens=prompt_tokens,
            completion_tokens=config.generation.max_completion_length,
            reference=g.beta > 0,
            extra_bytes=extra_bytes,
            fused_head=fused_head,
        )


def estimate(shape: StepShape, checkpointing: bool, chunk: int, logprob_rows: int) -> float:
    """The estimated peak bytes of one training step."""
    b = shape.bytes_per_value
    static = (shape.parameters * (2 if shape.reference else 1) + 3 * shape.trainable) * b + shape.extra_bytes
    rows = min(logprob_rows or shape.rows, shape.rows)
    groups = max(1, -(-rows // shape.group))
    tokens = rows * shape.completion_tokens + groups * shape.prompt_tokens
    sequence = shape.prompt_tokens + shape.completion_tokens
    per_token = b * (HIDDEN_TERMS * shape.hidden + INTERMEDIATE_TERMS * shape.intermediate
                     + ATTENTION_TERMS * shape.heads * sequence)
    if checkpointing:
        activations = tokens * (shape.layers * shape.hidden * b + per_token)
    else:
        activations = tokens * shape.layers * per_token
    positions = rows * shape.completion_tokens
    if not chunk and shape.fused_head:  # the fused head's own chunk, about FUSED_IN_FLIGHT of them queued
        chunk = FUSED_IN_FLIGHT * max(16, FUSED_CHUNK_BYTES // (4 * max(shape.vocabulary, 1)))
    logits = (min(chunk, positions) if chunk else positions) * shape.vocabulary * 4 * LOGIT_COPIES
    return static + activations + logits + PROCESS_BYTES


# The vocabulary chunk memory_limit_gb picks (positions): measured by bench/memory.py, 64 keeps a
# 0.6B-shaped step's head under the optimizer update's own peak (6.6 GiB against 9.4 unchunked, 4 layers).
CHUNK = 64


def candidates(rows: int) -> list[tuple[bool, int, int]]:
    """(checkpointing, vocabulary chunk, log-prob rows) from the fastest to the most frugal: the
    chunk recomputes only the head in the backward pass, checkpointing every block."""
    out = [(False, 0, 0), (False, CHUNK, 0), (True, CHUNK, 0)]
    size = rows // 2
    while size >= 1:
        out.append((True, CHUNK, size))
        size //= 2
    return out


def choose(model: nn.Module, config: Config, prompt_tokens: int, extra_bytes: int = 0,
           fused_head: bool = False) -> Choice:
    """The first candidate (kept at least as frugal as the user's own switches) under the limit;
    a ``ConfigError`` naming ``training.memory_limit_gb`` in one sentence when none is.
    ``extra_bytes``: judge models' weights, counted with the policy's; ``fused_head``: the plan's."""
    return choose_for(StepShape.of(model, config, prompt_tokens, extra_bytes, fused_head), config.training)


def smallest_budget(shape: StepShape) -> float:
    """The smallest ``memory_limit_gb`` (GB, rounded up to a tenth) that some candidate fits in."""
    best = min(estimate(shape, c, k, r) for c, k, r in candidates(shape.rows)) / GB
    return math.ceil(best * 10) / 10


def choose_for(shape: StepShape, t: TrainingConfig) -> Choice:
    """``choose`` for a step's shape and the ``[training]`` table."""
    tried = None
    for checkpointing, chunk, rows in candidates(shape.rows):
        checkpointing = checkpointing or t.gradient_checkpointing
        chunk = min(c for c in (chunk, t.vocab_chunk_size) if c) if chunk or t.vocab_chunk_size else 0
        rows = min(r for r in (rows, t.logprob_batch_size) if r) if rows or t.logprob_batch_size else 0
        tried = Choice(checkpointing, chunk, rows, estimate(shape, checkpointing, chunk, rows) / GB)
        if tried.estimate_gb <= t.memory_limit_gb:
            return tried
    assert tried is not None
    static = ((shape.parameters * (2 if shape.reference else 1) + 3 * shape.trainable) * shape.bytes_per_value
              + shape.extra_bytes) / GB
    need = math.ceil(tried.estimate_gb * 10) / 10
    raise ConfigError("training.memory_limit_gb", (
        f"{t.memory_limit_gb:g} GB is too little for this model: even with every memory switch a step needs about "
        f"{tried.estimate_gb:.1f} GB (the weights, gradients and AdamW state alone are {static:.1f} GB); "
        f"the smallest budget that works is memory_limit_gb = {need:g}"
    ), kind="memory")


def evaluation_limit(limit_gb: float) -> int:
    """MLX's memory limit (``mx.set_memory_limit``, bytes) for ``memory_limit_gb``: the budget less
    the estimate's allowance for the process. Past it MLX's evaluation waits for queued work to
    finish, and free what it held, before it queues more. Without it the evaluation runs ahead of
    the CPU and allocates the outputs of several chunks' work at once: the 0.5B bench shape's LM
    head gradient peaks 1,293 MiB above its inputs, with the limit 700 MiB above them at 1,192, in
    1.10× the time (bench/memory_limit.py; bench/README.md, "MLX's memory limit")."""
    return max(int(limit_gb * GB - PROCESS_BYTES), int(limit_gb * GB / 2))
