"""The engine plan: which fast paths run for this model, decided once (docs/architecture.md,
"Engine plan").

Every acceleration is optional, and every switch that turns one off is read here and nowhere else
(``GRPO_TUI_<NAME>=0``). The code paths consult the plan instead of deciding again, and the
worker's ``engine:`` log line is ``describe()``, so the log says what runs.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten

from grpo_tui.protocol.config import Config
from grpo_tui.worker.engine.models import architectures, memory_fit
from grpo_tui.worker.engine.learning import chunked_head
from grpo_tui.worker.engine.accel import cpu_fast, fastgen, host_head, host_vocab, memory, patches, shared_prompt, two_cores

# Above this a step is matmul-bound: BLAS already uses both cores, and a trace of every layer costs
# more than the compiled loss saves. The one place this limit is written.
SMALL_MODEL_PARAMETERS = 50_000_000

SWITCHES = {
    "fast_rollout": "GRPO_TUI_FAST_ROLLOUT",
    "shared_prompt": "GRPO_TUI_SHARED_PROMPT",
    "compiled_loss": "GRPO_TUI_COMPILED_LOSS",
    "host_vocab": "GRPO_TUI_HOST_VOCAB",
    "host_sampling": "GRPO_TUI_HOST_SAMPLING",
    "fused_head": "GRPO_TUI_FUSED_HEAD",
    "two_streams": "GRPO_TUI_TWO_STREAMS",
    "cpu_kernels": "GRPO_TUI_CPU_KERNELS",
    "keep_freed_memory": "GRPO_TUI_KEEP_FREED_MEMORY",
}
# MLX orders a graph breadth-first across at most this many branches (its default: 20), read once
# at its first evaluation. A wider order lets the two CPU streams' ops interleave.
BFS_WIDTH_VARIABLE, BFS_WIDTH = "MLX_BFS_MAX_WIDTH", "200"


def _on(environ: Mapping[str, str], name: str) -> bool:
    return environ.get(SWITCHES[name], "1") != "0"


def saves_memory(config: Config) -> bool:
    """Whether the config asks for any memory switch (docs/config.md, "Memory")."""
    t = config.training
    return t.gradient_checkpointing or t.vocab_chunk_size > 0 or t.logprob_batch_size > 0 or t.memory_limit_gb > 0


# [async]'s learner and generator share the machine's cores: each process's BLAS runs one thread (and
# the plan one CPU stream), so the two never fight for the same cores, and a thread pool's spin or
# wake-up per small matmul is not paid (bench/README.md, "async_grpo.py").
SHARED_CORES_ENV = {"MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}


def prepare_process(environ: Mapping[str, str] | None = None, *, saving_memory: bool = False,
                    parameters: int | None = None, sharing_cores: bool = False) -> bool:
    """Process-wide settings, before the first MLX evaluation and allocation: the wider evaluation
    order for a small model (``parameters``, from the weight files' headers: at most
    ``SMALL_MODEL_PARAMETERS``, or unknown), where it lets the two CPU streams' halves interleave;
    a user's own ``MLX_BFS_MAX_WIDTH`` wins. A larger model, or a run with a memory switch on,
    keeps MLX's default: there the wider order holds more memory at the end of the backward pass
    for no speed (bench/README.md, "Width 20 for large models"). And malloc keeping freed memory.
    ``sharing_cores`` ([async]: a learner and a generator process): one BLAS thread each
    (``SHARED_CORES_ENV``; a user's own settings win).
    Returns whether malloc keeps freed memory (glibc only, so the answer comes from trying)."""
    env = os.environ if environ is None else environ
    small = parameters is None or parameters <= SMALL_MODEL_PARAMETERS
    if environ is None and not saving_memory and small:
        os.environ.setdefault(BFS_WIDTH_VARIABLE, BFS_WIDTH)
    if environ is None and sharing_cores:
        for name, value in SHARED_CORES_ENV.items():
            os.environ.setdefault(name, value)
    return _on(env, "keep_freed_memory") and memory.keep_freed_memory()


class Head(Enum):
    """How the LM head and the vocabulary log-softmax run in the loss (``logps.token_logps``)."""

    MLX = "mlx"  # MLX's logits and log-softmax, the rows split over the CPU streams
    HOST_VOCAB = "host_vocab"  # accel.host_vocab: MLX's logits, the log-softmax in numpy by positions
    HOST_HEAD = "host_head"  # accel.host_head: a plain head and the log-softmax in numpy by vocabulary blocks
    FUSED = "fused"  # chunked_head, unchunked: head + log-softmax with one vocabulary-wide exp
    CHUNKED = "chunked"  # chunked_head, vocab_chunk_size positions at a time (a memory switch)


@dataclass(frozen=True)
class EnginePlan:
    """Which paths run for one model."""

    device: str
    parameters: int
    vocabulary: int
    fast_rollout: bool  # accel.fastgen: compiled decode loop, one prefill per prompt
    shared_prompt: bool  # accel.shared_prompt: each group's prompt once in the training forward
    compiled_loss: bool  # loss.py under mx.compile (small models, shared-prompt layout)
    head: Head  # the loss's LM head and log-softmax
    two_streams: bool  # accel.two_cores: each micro-batch's halves on two CPU streams
    cpu_kernels: bool  # accel.cpu_fast via accel.patches: x86 exp/SwiGLU/attention/RoPE
    keep_freed_memory: bool  # accel.memory: malloc keeps freed memory
    evaluation_width: str | None  # MLX_BFS_MAX_WIDTH as MLX reads it
    host_sampling: bool = False  # accel.host_sampling: the keyed draw in numpy (else MLX's Gumbel-max)
    speed_paths_off: str | None = None  # architectures.speed_paths_off: why this architecture runs stock
    one_row_rollout: str | None = None  # architectures.one_row_rollout: why rows are generated one by one
    # The memory switches of [training] (docs/config.md, "Memory"), or memory_limit_gb's choice; 0 / False = off.
    gradient_checkpointing: bool = False  # engine.checkpointing: blocks recomputed backward
    vocab_chunk_size: int = 0  # engine.chunked_head: positions per head/log-softmax chunk (head CHUNKED)
    logprob_batch_size: int = 0  # batch.row_parts: completions per forward/backward
    memory_fit: str | None = None  # memory_limit_gb: what memory_fit chose, and why

    def pack_group(self, group_size: int) -> int:
        """The ``group`` to pack micro-batches with: the shared-prompt layout, or plain rows."""
        return group_size if self.shared_prompt else 1

    def describe(self) -> str:
        """The worker log's ``engine:`` line."""
        rollout = "rollout: compiled loop, one prefill per prompt"
        if self.fast_rollout and self.cpu_kernels:
            rollout += " and its KV cache read once per group"  # fastgen.SharedPromptCache
        paths = [rollout if self.fast_rollout else "rollout: mlx-lm BatchGenerator"]
        paths.append(f"sampling: keyed inverse-CDF in numpy (a host buffer of {self.vocabulary * 4 / 2**20:.2f} MB per row)"
                     if self.host_sampling else "sampling: keyed Gumbel-max in MLX")
        paths.append("training: prompt once per group" if self.shared_prompt else "training: full sequences")
        if self.compiled_loss:
            paths.append("compiled loss")
        # The speed paths' own memory, said with them (docs/config.md, "Memory").
        if self.head is Head.HOST_HEAD:
            paths.append(f"LM head and vocabulary log-softmax in numpy, {host_head.BLOCK} vocabulary entries at a "
                         f"time (the logits never exist whole; {8 * host_head.BLOCK // 1024} KB of host buffers "
                         "per position)")
        elif self.head is Head.HOST_VOCAB:
            rows = host_vocab.chunk_rows(self.vocabulary)
            paths.append(f"vocabulary log-softmax in numpy, {rows} positions at a time "
                         f"(a {rows * self.vocabulary * 4 / 2**20:.0f} MB host buffer)")
        elif self.head is Head.FUSED:
            paths.append(f"LM head and log-softmax fused, {chunked_head.fused_chunk(self.vocabulary)} positions at a time "
                         "(one exp over the vocabulary forward, one backward)")
        if self.two_streams:
            paths.append("batch halves on two CPU streams")
        if self.cpu_kernels:
            paths.append("x86 CPU exp/SwiGLU/attention/RoPE")
        if self.keep_freed_memory:
            paths.append("malloc keeps freed memory (resident memory stays at the run's peak)")
        if self.evaluation_width:
            paths.append(f"evaluation order width {self.evaluation_width}")
        if self.one_row_rollout:
            paths.append(f"rollout one row at a time ({self.one_row_rollout})")
        if self.speed_paths_off:
            paths.append(self.speed_paths_off)
        if self.gradient_checkpointing:
            paths.append("gradient checkpointing (blocks recomputed in the backward pass)")
        if self.head is Head.CHUNKED:
            paths.append(f"LM head and log-softmax in chunks of {self.vocab_chunk_size} positions")
        if self.logprob_batch_size:
            paths.append(f"log-prob/loss passes of at most {self.logprob_batch_size} completions")
        paths.append(f"{self.device}, {self.parameters:,} parameters, vocabulary {self.vocabulary:,}")
        return "; ".join(paths)


def decide(model: nn.Module, config: Config, *, prompt_tokens: int = 0, extra_bytes: int = 0,
           keeps_freed_memory: bool = False, environ: Mapping[str, str] | None = None) -> EnginePlan:
    """The plan for ``model`` (loaded, LoRA added, not yet patched) trained with ``config``;
    ``prompt_tokens`` (the longest prompt) and ``extra_bytes`` (judge models' weights) are for
    ``memory_limit_gb``'s fit (a ``ConfigError`` when nothing fits)."""
    env = os.environ if environ is None else environ
    cpu = mx.default_device() == mx.cpu
    parameters = sum(v.size for _, v in tree_flatten(model.parameters()))
    vocabulary = int(getattr(getattr(model, "args", None), "vocab_size", 0) or 0)
    small = parameters <= SMALL_MODEL_PARAMETERS
    shared = _on(env, "shared_prompt") and shared_prompt.supports(model) and config.grpo.group_size >= 2
    training = config.training
    checkpointing, chunk, rows = training.gradient_checkpointing, training.vocab_chunk_size, training.logprob_batch_size
    fit = None
    if training.memory_limit_gb > 0:  # the switches whose estimated step fits, the user's own kept
        choice = memory_fit.choose_for(fit_shape(model, config, prompt_tokens, extra_bytes, env), training)
        checkpointing, chunk, rows = choice.gradient_checkpointing, choice.vocab_chunk_size, choice.logprob_batch_size
        fit = choice.describe(training.memory_limit_gb)
    chunk = chunk if chunked_head.supports(model) else 0
    # The numpy log-softmax evaluates mid-graph, so a compiled loss cannot use it. On the CPU a
    # large vocabulary's log-softmax is most of a small model's step, and numpy's exp beats MLX's
    # inside the trace (bench/README.md, real-vocab-tiny): there the loss stays eager.
    # Small models only: evaluating the logits mid-graph keeps every block's intermediates of the
    # gradient transform alive, which a large model's step cannot afford (bench/README.md, "Memory").
    host = _on(env, "host_vocab") and cpu and small and vocabulary >= host_vocab.MIN_VOCABULARY
    # A trace is one evaluation, while the memory switches evaluate piece by piece (the chunked
    # head per chunk, the row parts per part); the compiled loss is a small-model speed path anyway.
    # TRL's entropy bonus runs eager: its mean entropy in a traced loss and gradient hits an MLX 0.32
    # compile error ("_Map_base::at", tests/worker/engine/test_entropy_bonus.py).
    bonus = config.grpo.entropy_coef != 0.0 or config.grpo.use_adaptive_entropy
    compiled = (_on(env, "compiled_loss") and shared and small and not saves_memory(config) and not host
                and not bonus)
    # Where the numpy log-softmax is not for (large models, GPUs) and the loss is eager: MLX's own
    # logsumexp, softmax and logsumexp gradient each take an exp over the vocabulary, one is enough.
    fused = _on(env, "fused_head") and chunked_head.supports(model) and not host and not compiled
    two = (_on(env, "two_streams") and (os.cpu_count() or 1) >= 2 and len(two_cores.streams()) >= 2 and small
           and not config.async_.shares_cores)  # [async]: the other core is the generator's
    return EnginePlan(
        device="cpu" if cpu else "gpu",
        parameters=parameters,
        vocabulary=vocabulary,
        fast_rollout=_on(env, "fast_rollout") and fastgen.supports(model, config.generation.repetition_penalty),
        shared_prompt=shared,
        compiled_loss=compiled,
        head=_head(model, chunk, host, fused),
        two_streams=two,
        cpu_kernels=_on(env, "cpu_kernels") and cpu_fast.enabled() and patches.can_patch(model),
        keep_freed_memory=keeps_freed_memory,
        evaluation_width=env.get(BFS_WIDTH_VARIABLE),
        host_sampling=_on(env, "host_sampling") and cpu and vocabulary >= host_vocab.MIN_VOCABULARY,
        speed_paths_off=architectures.speed_paths_off(model),
        one_row_rollout=architectures.one_row_rollout(model),
        gradient_checkpointing=checkpointing,
        vocab_chunk_size=chunk,
        logprob_batch_size=rows,
        memory_fit=fit,
    )



def fit_shape(model: nn.Module, config: Config, prompt_tokens: int, extra_bytes: int = 0,
              environ: Mapping[str, str] | None = None) -> memory_fit.StepShape:
    """The step ``memory_limit_gb``'s estimate sees: the model, the batch, and the loss's head as it
    runs with a memory limit (the loss is then eager, ``saves_memory``): numpy's for a small model
    on the CPU with a large vocabulary, else the fused head where it applies, else MLX's own ops."""
    env = os.environ if environ is None else environ
    parameters = sum(v.size for _, v in tree_flatten(model.parameters()))
    vocabulary = int(getattr(getattr(model, "args", None), "vocab_size", 0) or 0)
    host = (_on(env, "host_vocab") and mx.default_device() == mx.cpu and parameters <= SMALL_MODEL_PARAMETERS
            and vocabulary >= host_vocab.MIN_VOCABULARY)
    if host:
        head = "host" if chunked_head.plain_weight(model) is not None else "mlx"
    else:
        head = "fused" if _on(env, "fused_head") and chunked_head.supports(model) else "mlx"
    sampling = _on(env, "host_sampling") and mx.default_device() == mx.cpu and vocabulary >= host_vocab.MIN_VOCABULARY
    return memory_fit.StepShape.of(model, config, prompt_tokens, extra_bytes, head, sampling)


def for_generation(model: nn.Module, repetition_penalty: float = 1.0) -> EnginePlan:
    """The plan of a model that only generates (a reward's judge model): the compiled loop where
    ``fastgen`` takes the model, else mlx-lm's BatchGenerator (one row at a time where the
    architecture needs it), with MLX's own kernels and sampler (the model is not patched)."""
    return EnginePlan(
        device="cpu" if mx.default_device() == mx.cpu else "gpu",
        parameters=sum(v.size for _, v in tree_flatten(model.parameters())),
        vocabulary=int(getattr(getattr(model, "args", None), "vocab_size", 0) or 0),
        fast_rollout=fastgen.supports(model, repetition_penalty), shared_prompt=False, compiled_loss=False,
        head=Head.MLX, two_streams=False, cpu_kernels=False, keep_freed_memory=False, evaluation_width=None,
        speed_paths_off=architectures.speed_paths_off(model), one_row_rollout=architectures.one_row_rollout(model),
    )

def _head(model: nn.Module, chunk: int, host: bool, fused: bool) -> Head:
    """The loss's head: a memory switch's chunks first, then the numpy paths (the head too when it
    is a plain one), then the fused head."""
    if chunk:
        return Head.CHUNKED
    if host:
        return Head.HOST_HEAD if chunked_head.plain_weight(model) is not None else Head.HOST_VOCAB
    return Head.FUSED if fused else Head.MLX
