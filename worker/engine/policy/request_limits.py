"""What one generation request may ask (docs/security.md, "The policy's endpoint"): sampling values of
the right kind and range, and no more new tokens than the run's ``generation.max_completion_length``
or the model's context leaves. Asked by the policy's endpoint (a 400) and by a rollout function's
``generate_rollout_completions(..., generation_overrides=...)`` (a mistake), before anything runs."""

from __future__ import annotations

from typing import Any


def overrides_problem(overrides: dict[str, Any], prompt_length: int, limit: int, context: int | None) -> str | None:
    """Why one request's sampling settings (vLLM's names) cannot be generated, in one sentence: a
    value of the wrong kind or range, or more new tokens than the run's
    ``generation.max_completion_length`` or the model's context leaves after the prompt. The rollout
    function's ``generation_overrides`` and the policy's endpoint both ask this, before anything runs."""

    def number(name: str, low: float, high: float, *, low_open: bool = False) -> str | None:
        value = overrides.get(name)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value or \
                not (low < value if low_open else low <= value) or value > high:
            shown = repr(value)[:40]
            return f"{name} must be a number {'>' if low_open else '>='} {low:g} and <= {high:g} (got {shown})"
        return None

    for problem in (number("temperature", 0.001, 100.0), number("top_p", 0.0, 1.0, low_open=True),
                    number("min_p", 0.0, 1.0), number("repetition_penalty", 0.0, 100.0, low_open=True)):
        if problem:
            return problem
    top_k = overrides.get("top_k")
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or not -1 <= top_k <= 2**31):
        return f"top_k must be a whole number >= -1 (got {repr(top_k)[:40]})"
    wanted = overrides.get("max_tokens")
    if wanted is None:
        wanted = limit
    elif isinstance(wanted, bool) or not isinstance(wanted, int) or wanted < 1:
        return f"max_tokens must be a whole number >= 1 (got {repr(wanted)[:40]})"
    elif wanted > limit:
        return (f"max_tokens {wanted:,} is over this run's generation.max_completion_length ({limit:,}); ask for at most "
                f"{limit:,}, or raise that key")
    if context is not None and prompt_length + wanted > context:
        room = context - prompt_length
        return (f"the prompt's {prompt_length:,} tokens and max_tokens {wanted:,} pass the model's context of "
                f"{context:,} tokens; " + (f"ask for at most {room:,}" if room > 0 else "shorten the prompt"))
    return None
