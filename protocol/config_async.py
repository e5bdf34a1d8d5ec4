"""``[async]``: asynchronous GRPO (docs/async.md). The generator rolls out and scores the next
steps' prompts while the learner trains, at most ``max_staleness`` optimizer steps behind it, in a
process of its own on this machine or on ``generator_hosts`` over ``mlx.launch``. Off by default
(``max_staleness = 0``): today's synchronous step, in one process.

The importance-sampling correction takes TRL's ``vllm_importance_sampling_*`` names without the
``vllm_`` (there is no vLLM here: the sampler is the generator's copy of the policy, some steps old).
"""

from __future__ import annotations

from typing import Literal

import msgspec

from grpo_tui.protocol.config_base import Section, invalid

ImportanceSamplingMode = Literal["token_truncate", "token_mask", "sequence_truncate", "sequence_mask"]
IMPORTANCE_SAMPLING_MODES: tuple[str, ...] = ImportanceSamplingMode.__args__  # type: ignore[attr-defined]


class AsyncConfig(Section):
    # How many optimizer steps the generator may run ahead of the learner: a step trains on
    # completions sampled by weights at most this many updates old. 0: synchronous (one process).
    max_staleness: int = 0
    # The learner sends the generator its weights every this many steps (LoRA: the adapters only).
    weight_sync_steps: int = 1
    # Where the generator runs: [] a process of its own on this machine; else hosts that
    # ``mlx.launch`` starts it on (one for now), after the learner's host.
    generator_hosts: list[str] = msgspec.field(default_factory=list)
    # Off-policy correction (TRL's vllm_importance_sampling_correction, _mode, _clip_min, _clip_max):
    # the ratio of the learner's probability of each sampled token (or sequence) to the sampler's.
    importance_sampling_correction: bool = True
    importance_sampling_mode: ImportanceSamplingMode = "sequence_mask"
    importance_sampling_clip_min: float | None = None
    importance_sampling_clip_max: float | None = 3.0

    def __post_init__(self) -> None:
        if self.max_staleness < 0:
            raise invalid("max_staleness", self.max_staleness, "must be 0 (synchronous) or more")
        if self.weight_sync_steps < 1:
            raise invalid("weight_sync_steps", self.weight_sync_steps, "must be at least 1")
        if self.max_staleness and self.weight_sync_steps > self.max_staleness + 1:
            raise invalid("weight_sync_steps", self.weight_sync_steps,
                          f"needs max_staleness of at least {self.weight_sync_steps - 1}: weights that arrive every "
                          f"{self.weight_sync_steps} steps leave the generator that many steps behind; lower "
                          f"weight_sync_steps or raise max_staleness")
        if len(self.generator_hosts) > 1:
            raise invalid("generator_hosts", self.generator_hosts, "can name one host for now (one generator)")
        if any(not h or "," in h for h in self.generator_hosts):
            raise invalid("generator_hosts", self.generator_hosts, "must be host names, one per element")
        low, high = self.importance_sampling_clip_min, self.importance_sampling_clip_max
        if low is not None and low < 0:
            raise invalid("importance_sampling_clip_min", low, "must be 0 or more")
        if high is not None and high <= 0:
            raise invalid("importance_sampling_clip_max", high, "must be above 0")
        if low is not None and high is not None and low > high:
            raise invalid("importance_sampling_clip_min", low, f"must not exceed importance_sampling_clip_max ({high})")

    @property
    def on(self) -> bool:
        return self.max_staleness > 0

    @property
    def shares_cores(self) -> bool:
        """The generator runs on this machine beside the learner (not on ``generator_hosts``)."""
        return self.on and not self.generator_hosts
