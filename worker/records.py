"""What one training step hands to the worker loop: the contract between the engine
(``trainer``) and the process around it (``main``, ``store``, ``checkpoint``)."""

from __future__ import annotations

from dataclasses import dataclass, field

from grpo_tui.protocol.messages import Sample, Step, ToolCall


@dataclass
class Generation:
    """One completion with everything the store keeps about it."""

    prompt_index: int  # index of the prompt within the step's batch
    group_index: int  # index of the completion within its group (0..G-1)
    prompt: str  # the rendered prompt text shown to the model
    completion: str  # the answer text, thinking removed
    raw_completion: str  # exactly what the model produced (decoded from its token ids)
    thinking: str | None
    reward: float | None  # weighted sum over reward functions
    reward_details: dict[str, float | None]  # per reward function (unweighted), None = not applicable
    advantage: float | None
    num_tokens: int
    finish_reason: str  # stop | length | repetition
    tool_calls: list[ToolCall] = field(default_factory=list)

    def to_sample(self, step: int, group_size: int) -> Sample:
        return Sample(
            step=step,
            index=self.prompt_index * group_size + self.group_index,
            group=self.prompt_index,
            prompt=self.prompt,
            completion=self.completion,
            reward=self.reward,
            reward_details=self.reward_details,
            advantage=self.advantage,
            num_tokens=self.num_tokens,
            finish_reason=self.finish_reason,  # type: ignore[arg-type]
            thinking=self.thinking,
            tool_calls=self.tool_calls,
        )


@dataclass
class StepOutput:
    """The result of ``Trainer.train_step``: the ``step`` metrics and every generation."""

    metrics: Step
    generations: list[Generation]
