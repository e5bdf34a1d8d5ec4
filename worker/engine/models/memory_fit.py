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
# What each block keeps for the backward pass, per token, in values of the hidden size, of the
# attention's query width and of the MLP's intermediate size (the norms' inputs and outputs, the
# projections' inputs and outputs, the SwiGLU's gate and up: cpu_fast.swiglu_down recomputes their
# product where the down projection trains in full; LoRA's keeps it and silu(gate) too), besides each
# row's keys and values over the whole sequence and its attention weights (ATTENTION_COPIES per head,
# position and key).
HIDDEN_VALUES, QUERY_VALUES, ATTENTION_COPIES = 4, 3, 2
INTERMEDIATE_VALUES, INTERMEDIATE_VALUES_LORA = 2, 4
LOGIT_COPIES = 4  # MLX's own head: logits, softmax and their cotangents alive at once in the backward
CHUNK_COPIES = 3  # the chunked head: a chunk's logits, its softmax, and the next chunk's logits
# chunked_head.FUSED_CHUNK_BYTES (not imported: this module's estimate runs without the model's
# MLX kernels), and the chunks MLX's queue holds at once (chunked_head: about two, and the running one)
FUSED_CHUNK_BYTES = 58 * 2**20
FUSED_IN_FLIGHT = 3
# accel.host_head (small models on the CPU): per position, its two kept buffers of a block of 2,048
# logits; and the (vocabulary, hidden) arrays its gradient holds at once in MLX (each CPU stream's
# half writes its own, then their sum, the running sum and the tied embedding's fold) and in numpy
# (the weight with a column of ones).
HOST_BLOCK_BYTES = 2 * 2048 * 4
HOST_HEAD_COPIES, HOST_WEIGHT_COPIES = 5, 1
# The process, MLX's arrays aside: the interpreter, MLX, BLAS and numpy when loaded, the tokenizer's
# tables (per vocabulary entry), and what the first step adds (compiled kernels, threads' buffers);
# the rollout's numpy sampling buffer (a float32 row of the vocabulary per completion) with
# ``host_sampling``.
PROCESS_BYTES = int(0.09 * GB)
VOCABULARY_ENTRY_BYTES = 950
STEP_BYTES = int(0.05 * GB)


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
    head: str = "mlx"  # the loss's head without a vocabulary chunk: "fused", "host" (numpy's) or "mlx"
    kv_heads: int = 0  # 0: as many as the query heads
    head_dim: int = 0  # 0: hidden // heads
    micro_batches: int = 1  # gradient_accumulation_steps
    host_sampling: bool = False  # the rollout's draw in numpy (plan.host_sampling)

    @classmethod
    def of(cls, model: nn.Module, config: Config, prompt_tokens: int, extra_bytes: int = 0,
           head: str = "mlx", host_sampling: bool = False) -> "StepShape":
        args = model.args
        params = tree_flatten(model.parameters())
        trainable = sum(v.size for _, v in tree_flatten(model.trainable_parameters()))
        g, t = config.grpo, config.training
        heads = int(getattr(args, "num_attention_heads", 1))
        return cls(
            parameters=sum(v.size for _, v in params),
            trainable=trainable,
            bytes_per_value=max((v.itemsize for _, v in params), default=4),
            vocabulary=int(args.vocab_size),
            hidden=int(args.hidden_size),
            intermediate=int(getattr(args, "intermediate_size", 4 * args.hidden_size)),
            heads=heads,
            layers=len(model.model.layers),
            rows=t.batch_size // t.gradient_accumulation_steps * g.group_size,
            group=g.group_size,
            prompt_tokens=prompt_tokens,
            completion_tokens=config.generation.max_completion_length,
            reference=g.beta > 0,
            extra_bytes=extra_bytes,
            head=head,
            kv_heads=int(getattr(args, "num_key_value_heads", None) or heads),
            head_dim=int(getattr(args, "head_dim", None) or args.hidden_size // heads),
            micro_batches=t.gradient_accumulation_steps,
            host_sampling=host_sampling,
        )


def _full(shape: StepShape) -> bool:
    """Full fine-tuning (most weights train, the head among them), not LoRA."""
    return shape.trainable > shape.parameters // 2


def _block_bytes(shape: StepShape, rows: int, groups: int) -> float:
    """What one block keeps for the backward pass over ``rows`` completions of ``groups`` prompts
    (the shared-prompt layout: each group's prompt once, its keys and values repeated per row)."""
    s = shape
    head_dim = s.head_dim or s.hidden // max(s.heads, 1)
    query, kv = s.heads * head_dim, (s.kv_heads or s.heads) * head_dim
    sequence = s.prompt_tokens + s.completion_tokens
    tokens = rows * s.completion_tokens + groups * s.prompt_tokens
    intermediate = INTERMEDIATE_VALUES if _full(s) else INTERMEDIATE_VALUES_LORA
    per_token = HIDDEN_VALUES * s.hidden + QUERY_VALUES * query + intermediate * s.intermediate
    keys_values = rows * sequence * 2 * kv
    weights = ATTENTION_COPIES * rows * s.heads * s.completion_tokens * sequence
    return s.bytes_per_value * (tokens * per_token + keys_values) + 4 * weights


def process_bytes(shape: StepShape) -> float:
    """What the worker process holds besides MLX's arrays at a step's peak."""
    sampling = 4 * shape.vocabulary * shape.rows * shape.micro_batches if shape.host_sampling else 0
    return PROCESS_BYTES + VOCABULARY_ENTRY_BYTES * shape.vocabulary + STEP_BYTES + sampling


def estimate(shape: StepShape, checkpointing: bool, chunk: int, logprob_rows: int) -> float:
    """The estimated peak resident bytes of one training step: the process's own memory, and the
    larger of the rollout's and the training's arrays."""
    s, b = shape, shape.bytes_per_value
    state = (s.parameters * (2 if s.reference else 1) + 2 * s.trainable) * b + s.extra_bytes  # weights, moments
    rows = min(logprob_rows or s.rows, s.rows)
    groups = max(1, -(-rows // s.group))
    # A step in parts (row parts, micro-batches) holds the parts' running sum beside the part's own gradient.
    parts = s.micro_batches * -(-s.rows // rows)
    gradients = s.trainable * b * (2 if parts > 1 else 1)
    if checkpointing:  # each block's input, each prompt's blocks whole (its keys and values leave
        # the block), and one block's recomputation at a time
        prompt_only = _block_bytes(s, 0, groups)
        activations = (s.layers * (b * rows * s.completion_tokens * s.hidden + prompt_only)
                       + _block_bytes(s, rows, groups))
    else:
        activations = s.layers * _block_bytes(s, rows, groups)
    positions = rows * s.completion_tokens
    vocabulary_row = 4 * s.vocabulary  # float32 logits
    head_trained = _full(s)
    if chunk:
        head = CHUNK_COPIES * min(chunk, positions) * vocabulary_row
    elif s.head == "fused":
        head = min(FUSED_IN_FLIGHT * max(16, FUSED_CHUNK_BYTES // vocabulary_row), positions) * vocabulary_row
    elif s.head == "host":
        head = positions * HOST_BLOCK_BYTES + HOST_WEIGHT_COPIES * s.vocabulary * (s.hidden + 1) * 4
        if head_trained:
            head += HOST_HEAD_COPIES * s.vocabulary * s.hidden * b
    else:
        head = LOGIT_COPIES * positions * vocabulary_row
    training = state + gradients + activations + head
    kv_width = 2 * (s.kv_heads or s.heads) * (s.head_dim or s.hidden // max(s.heads, 1))
    cache = s.layers * s.rows * (s.prompt_tokens + s.completion_tokens) * kv_width * b
    rollout = state + cache + 2 * s.rows * vocabulary_row
    return max(training, rollout) + process_bytes(s)


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


def choose(model: nn.Module, config: Config, prompt_tokens: int, extra_bytes: int = 0, head: str = "mlx") -> Choice:
    """The first candidate (kept at least as frugal as the user's own switches) under the limit;
    a ``ConfigError`` naming ``training.memory_limit_gb`` in one sentence when none is.
    ``extra_bytes``: judge models' weights, counted with the policy's; ``head``: the plan's."""
    return choose_for(StepShape.of(model, config, prompt_tokens, extra_bytes, head), config.training)


def smallest_budget(shape: StepShape) -> float:
    """The smallest ``memory_limit_gb`` (GB, rounded up to a tenth) that some candidate fits in."""
    best = min(estimate(shape, c, k, r) for c, k, r in candidates(shape.rows)) / GB
    return math.ceil(best * 10) / 10


def choose_for(shape: StepShape, t: TrainingConfig) -> Choice:
    """``choose`` for a step's shape and the ``[training]`` table."""
    tried = []
    for checkpointing, chunk, rows in candidates(shape.rows):
        checkpointing = checkpointing or t.gradient_checkpointing
        chunk = min(c for c in (chunk, t.vocab_chunk_size) if c) if chunk or t.vocab_chunk_size else 0
        rows = min(r for r in (rows, t.logprob_batch_size) if r) if rows or t.logprob_batch_size else 0
        tried.append(Choice(checkpointing, chunk, rows, estimate(shape, checkpointing, chunk, rows) / GB))
        if tried[-1].estimate_gb <= t.memory_limit_gb:
            return tried[-1]
    static = ((shape.parameters * (2 if shape.reference else 1) + 3 * shape.trainable) * shape.bytes_per_value
              + shape.extra_bytes) / GB
    # The most frugal candidate need not be the last: row parts hold a second gradient tree.
    best = min(choice.estimate_gb for choice in tried)
    raise ConfigError("training.memory_limit_gb", (
        f"{t.memory_limit_gb:g} GB is too little for this model: even with the memory switches a step needs about "
        f"{best:.1f} GB (the weights, gradients and AdamW state alone are {static:.1f} GB); "
        f"the smallest budget that works is memory_limit_gb = {math.ceil(best * 10) / 10:g}"
    ), kind="memory")


def evaluation_limit(limit_gb: float) -> int:
    """MLX's memory limit (``mx.set_memory_limit``, bytes) for ``memory_limit_gb``: the budget less
    the estimate's allowance for the process. Past it MLX's evaluation waits for queued work to
    finish, and free what it held, before it queues more. Without it the evaluation runs ahead of
    the CPU and allocates the outputs of several chunks' work at once, in a little more time
    (bench/memory_limit.py measures it; bench/README.md, "MLX's memory limit")."""
    return max(int(limit_gb * GB - PROCESS_BYTES - STEP_BYTES), int(limit_gb * GB / 2))
