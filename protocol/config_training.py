"""``[training]``: the optimizer, schedule, batch and memory switches (docs/config.md)."""

from __future__ import annotations

import math
from typing import Literal

from grpo_tui.protocol.config_base import Section as _Section, invalid as _invalid


OnNonfinite = Literal["stop", "checkpoint"]
SchedulerType = Literal["constant", "linear", "cosine", "constant_with_warmup", "cosine_with_min_lr"]


class TrainingConfig(_Section):
    learning_rate: float = 1e-5
    batch_size: int = 4  # prompts per step
    gradient_accumulation_steps: int = 1
    steps_per_generation: int = 1  # steps one generation feeds (TRL's generation reuse); > 1 trains off-policy
    num_epochs: int = 1
    max_steps: int = 0  # 0 = until the epochs end; > 0 overrides num_epochs (TRL)
    max_grad_norm: float = 1.0  # 0 = no clipping
    weight_decay: float = 0.0
    adam_beta1: float = 0.9  # AdamW's moment decays and epsilon (transformers' names and defaults)
    adam_beta2: float = 0.999
    adam_epsilon: float = 1e-8
    seed: int = 0
    nan_patience: int = 3  # consecutive non-finite steps before an emergency checkpoint
    on_nonfinite: OnNonfinite = "stop"  # "checkpoint": save the last finite weights and go on (docs/config.md)
    silent_patience: int = 10  # steps in a row with all-None or all-equal rewards before the run stops; 0 = never
    lr_scheduler_type: SchedulerType = "constant"  # TRL / transformers names and formulas
    warmup_steps: int = 0
    warmup_ratio: float = 0.0
    min_lr_rate: float = 0.0  # cosine_with_min_lr's floor, a fraction of learning_rate
    # Memory switches (docs/config.md, "Memory"): each trades speed for memory, same numbers.
    gradient_checkpointing: bool = False  # TRL's name: recompute each block's activations backward
    vocab_chunk_size: int = 0  # positions per LM-head/log-softmax chunk; 0 = all at once
    logprob_batch_size: int = 0  # completions per log-prob/loss forward+backward; 0 = the micro-batch
    memory_limit_gb: float = 0.0  # pick the switches that fit this estimate; 0 = off

    def __post_init__(self) -> None:
        if self.learning_rate <= 0:
            raise _invalid("learning_rate", self.learning_rate, "must be > 0")
        if self.batch_size < 1:
            raise _invalid("batch_size", self.batch_size, "must be at least 1")
        if self.gradient_accumulation_steps < 1:
            raise _invalid("gradient_accumulation_steps", self.gradient_accumulation_steps, "must be at least 1")
        if self.batch_size % self.gradient_accumulation_steps:
            raise _invalid(
                "gradient_accumulation_steps",
                self.gradient_accumulation_steps,
                f"must divide training.batch_size ({self.batch_size})",
            )
        if self.steps_per_generation < 1:
            raise _invalid("steps_per_generation", self.steps_per_generation, "must be at least 1 (1 = a generation per step)")
        if self.num_epochs < 1:
            raise _invalid("num_epochs", self.num_epochs, "must be at least 1")
        if self.max_steps < 0:
            raise _invalid("max_steps", self.max_steps, "must be >= 0 (0 = until the epochs end)")
        if self.max_grad_norm < 0:
            raise _invalid("max_grad_norm", self.max_grad_norm, "must be >= 0 (0 = no clipping)")
        if self.weight_decay < 0:
            raise _invalid("weight_decay", self.weight_decay, "must be >= 0")
        for name in ("adam_beta1", "adam_beta2"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise _invalid(name, getattr(self, name), "must be in [0, 1)")
        if not self.adam_epsilon > 0:
            raise _invalid("adam_epsilon", self.adam_epsilon, "must be > 0")
        if self.nan_patience < 1:
            raise _invalid("nan_patience", self.nan_patience, "must be at least 1")
        if self.warmup_steps < 0:
            raise _invalid("warmup_steps", self.warmup_steps, "must be >= 0")
        if not 0.0 <= self.warmup_ratio < 1.0:
            raise _invalid("warmup_ratio", self.warmup_ratio, "must be in [0, 1)")
        if not 0.0 <= self.min_lr_rate <= 1.0:
            raise _invalid("min_lr_rate", self.min_lr_rate, "must be in [0, 1]")
        if self.silent_patience < 0:
            raise _invalid("silent_patience", self.silent_patience, "must be >= 0 (0 = never stop)")
        if self.vocab_chunk_size < 0:
            raise _invalid("vocab_chunk_size", self.vocab_chunk_size, "must be >= 0 (0 = the whole vocabulary pass at once)")
        if self.logprob_batch_size < 0:
            raise _invalid("logprob_batch_size", self.logprob_batch_size, "must be >= 0 (0 = the whole micro-batch)")
        if self.memory_limit_gb < 0 or not math.isfinite(self.memory_limit_gb):
            raise _invalid("memory_limit_gb", self.memory_limit_gb, "must be >= 0 (0 = off)")
