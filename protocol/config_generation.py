"""``[generation]``: how the policy samples (docs/config.md)."""

from __future__ import annotations

from grpo_tui.protocol.config_base import Section as _Section, invalid as _invalid


MIN_TEMPERATURE = 0.001  # generation.temperature: logits / temperature must stay finite in float32


class GenerationConfig(_Section):
    max_completion_length: int = 128
    # TRL's: prompts longer than this many tokens are cut from the left (None: never cut; a prompt
    # that with max_completion_length overflows the model's context is then refused at load)
    max_prompt_length: int | None = None
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    enable_thinking: bool = False
    stop: list[str] = []  # stop strings (vLLM / TRL); the text is cut before them
    repetition_stop_ngram: int = 0  # end a completion repeating one n-gram ...
    repetition_stop_count: int = 0  # ... this many times in a row; 0 = off
    max_tool_calls: int = 4  # tool calls run per completion when [[tools]] are configured

    def __post_init__(self) -> None:
        if self.max_completion_length < 1:
            raise _invalid("max_completion_length", self.max_completion_length, "must be at least 1")
        if self.max_prompt_length is not None and self.max_prompt_length < 1:
            raise _invalid("max_prompt_length", self.max_prompt_length, "must be at least 1 (leave it out to never cut)")
        if not self.temperature >= MIN_TEMPERATURE:
            raise _invalid("temperature", self.temperature, f"must be at least {MIN_TEMPERATURE} (below, the logits "
                                                            "divided by it overflow and every step is non-finite)")
        if not 0 < self.top_p <= 1:
            raise _invalid("top_p", self.top_p, "must be in (0, 1]")
        if self.top_k < 0:
            raise _invalid("top_k", self.top_k, "must be >= 0 (0 = off)")
        if not 0 <= self.min_p < 1:
            raise _invalid("min_p", self.min_p, "must be in [0, 1)")
        if self.repetition_penalty <= 0:
            raise _invalid("repetition_penalty", self.repetition_penalty, "must be > 0")
        if any(not s for s in self.stop):
            raise _invalid("stop", self.stop, "must not contain an empty string")
        if self.repetition_stop_ngram < 0:
            raise _invalid("repetition_stop_ngram", self.repetition_stop_ngram, "must be >= 0 (0 = off)")
        count = self.repetition_stop_count
        if count < 0 or count == 1:
            raise _invalid("repetition_stop_count", count, "must be 0 (off) or at least 2")
        if (self.repetition_stop_ngram > 0) != (count > 0):
            raise _invalid(
                "repetition_stop_count" if count == 0 else "repetition_stop_ngram",
                count if count == 0 else self.repetition_stop_ngram,
                "— set both repetition_stop_ngram and repetition_stop_count (or neither)",
            )
        if self.max_tool_calls < 0:
            raise _invalid("max_tool_calls", self.max_tool_calls, "must be >= 0 (0 = no tool is ever run)")
