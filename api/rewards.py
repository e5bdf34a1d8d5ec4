"""TRL's reward functions under their TRL names: ``from grpo_tui.rewards import accuracy_reward``; and
the built-in rewards a config names, under those names: ``from grpo_tui.rewards import xml_format``.

When TRL is installed these are ``trl.rewards``' own functions. Otherwise they are equivalents
written after TRL 1.16's ``trl/rewards`` (Apache-2.0, the HuggingFace team), with the same
signatures and results: ``accuracy_reward`` and ``reasoning_accuracy_reward`` verify with
math_verify when it is installed (and then need it, as TRL's), else compare the answer's last
``\\boxed{}`` (or last number) with the solution as normalized text. They take completions as
strings or as TRL's one-message lists alike.
"""

from __future__ import annotations

import math
import re
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["accuracy_reward", "get_cosine_scaled_reward", "get_repetition_penalty_reward",
           "get_soft_overlong_punishment", "reasoning_accuracy_reward", "think_format_reward",
           "json_schema", "length", "tool_use", "xml_format"]

# The built-in rewards of a config's [[rewards]] name = "...", callable directly (mlx-node's users call
# theirs so): tool_use (with allowed_tools), xml_format (tags), length (a band), json_schema (schema).
# Imported on first use: they live with the worker's scoring.
BUILTINS = ("json_schema", "length", "tool_use", "xml_format")


def __getattr__(name: str) -> Any:
    if name in BUILTINS:
        from grpo_tui.worker.engine.scoring import rewards

        return getattr(rewards, name)
    raise AttributeError(f"module 'grpo_tui.rewards' has no attribute {name!r}")


def _text(completion: Any) -> str:
    return completion[0]["content"] if isinstance(completion, list) else str(completion)


def _has_math_verify() -> bool:
    try:
        import math_verify  # type: ignore[import-untyped,import-not-found,unused-ignore]  # noqa: F401
    except ImportError:
        return False
    return True


def _boxed(text: str) -> str | None:
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    depth, i = 1, start + len("\\boxed{")
    for j in range(i, len(text)):
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        if depth == 0:
            return text[i:j]
    return None


def _normal(text: str) -> str:
    text = text.strip().strip("$").replace("\\left", "").replace("\\right", "").replace(" ", "")
    text = re.sub(r"\\[dt]?frac\{([^{}]*)\}\{([^{}]*)\}", r"\1/\2", text)
    try:
        return repr(float(text))
    except ValueError:
        return text


def _plain_verify(content: str, solution: str) -> float | None:
    gold = _boxed(solution) or solution
    if not gold.strip():
        return None
    answer = _boxed(content)
    if answer is None:
        numbers = re.findall(r"-?\d+(?:\.\d+)?", content)
        answer = numbers[-1] if numbers else ""
    return float(_normal(answer) == _normal(gold))


def _math_verify(contents: list[str], solution: list[str]) -> list[float | None]:
    from latex2sympy2_extended import NormalizationConfig  # type: ignore[import-untyped,import-not-found,unused-ignore]
    from math_verify import LatexExtractionConfig, parse, verify  # type: ignore[import-untyped,import-not-found,unused-ignore]

    main = threading.current_thread() is threading.main_thread()  # signal.alarm timeouts need it, as in TRL
    parsing_timeout, verify_timeout = (10, 5) if main else (None, None)
    rewards: list[float | None] = []
    for content, sol in zip(contents, solution, strict=True):
        gold = parse(sol, parsing_timeout=parsing_timeout)
        if not gold:
            rewards.append(None)
            continue
        config = LatexExtractionConfig(normalization_config=NormalizationConfig(units=True), boxed_match_priority=0,
                                       try_extract_without_anchor=False)
        answer = parse(content, extraction_config=[config], extraction_mode="first_match",
                       parsing_timeout=parsing_timeout)
        rewards.append(float(verify(gold, answer, timeout_seconds=verify_timeout)))
    return rewards


def _own_accuracy_reward(completions: list[Any], solution: list[str], **kwargs: Any) -> list[float | None]:
    """1.0 where the completion's answer equals ``solution``; None where the solution cannot be read."""
    contents = [_text(c) for c in completions]
    if _has_math_verify():
        return _math_verify(contents, list(solution))
    return [_plain_verify(c, s) for c, s in zip(contents, solution, strict=True)]


def _own_reasoning_accuracy_reward(completions: list[Any], solution: list[str],
                                   reasoning_delimiters: list[str] | None = None, **kwargs: Any) -> list[float | None]:
    """``accuracy_reward`` on what follows the reasoning (``</think>``); 0.0 when the reasoning never ends."""
    delimiters = reasoning_delimiters or ["</think>"]
    out: list[float | None] = []
    for completion, sol in zip(completions, solution, strict=True):
        content = _text(completion)
        delimiter = next((d for d in delimiters if d in content), None)
        if delimiter is None:
            out.append(0.0)
            continue
        out.extend(_own_accuracy_reward([content.split(delimiter)[-1]], [sol]))
    return out


def _own_think_format_reward(completions: list[Any], **kwargs: Any) -> list[float]:
    """1.0 where the completion starts with one ``<think>...</think>`` block."""
    pattern = r"^<think>(?!.*<think>)(.*?)</think>.*$"
    return [1.0 if re.match(pattern, _text(c), re.DOTALL | re.MULTILINE) else 0.0 for c in completions]


class _CosineScaledReward:
    __name__ = "cosine_scaled_reward"

    def __init__(self, max_len: int, min_value_wrong: float, max_value_wrong: float, min_value_correct: float,
                 max_value_correct: float) -> None:
        self.max_len = max_len
        self.wrong = (max_value_wrong, min_value_wrong)  # swapped: a shorter wrong completion is penalized more
        self.correct = (min_value_correct, max_value_correct)

    def __call__(self, completions: list[Any], solution: list[str], completion_ids: list[list[int]],
                 **kwargs: Any) -> list[float | None]:
        rewards: list[float | None] = []
        for correct, ids in zip(_own_accuracy_reward(completions, solution), completion_ids, strict=True):
            if correct is None:
                rewards.append(None)
                continue
            low, high = self.correct if correct else self.wrong
            cosine = math.cos(min(len(ids) / self.max_len, 1.0) * math.pi)
            rewards.append(float(low + 0.5 * (high - low) * (1.0 + cosine)))
        return rewards


def _own_get_cosine_scaled_reward(max_len: int, min_value_wrong: float = -1.0, max_value_wrong: float = -0.5,
                                  min_value_correct: float = 0.5, max_value_correct: float = 1.0) -> Callable[..., Any]:
    return _CosineScaledReward(max_len, min_value_wrong, max_value_wrong, min_value_correct, max_value_correct)


class _RepetitionPenalty:
    __name__ = "repetition_penalty_reward"

    def __init__(self, ngram_size: int, max_penalty: float) -> None:
        self.ngram_size, self.max_penalty = ngram_size, max_penalty

    def __call__(self, completion_ids: list[list[int]], **kwargs: Any) -> list[float]:
        rewards = []
        for ids in completion_ids:
            if len(ids) < self.ngram_size:
                rewards.append(0.0)
                continue
            ngrams = list(zip(*[ids[i:] for i in range(self.ngram_size)]))
            scaling = 1 - len(set(ngrams)) / len(ngrams)
            rewards.append(scaling * self.max_penalty if scaling else 0.0)
        return rewards


def _own_get_repetition_penalty_reward(ngram_size: int = 3, max_penalty: float = -1.0) -> Callable[..., Any]:
    if max_penalty > 0:
        raise ValueError(f"max_penalty {max_penalty} should not be positive")
    return _RepetitionPenalty(ngram_size, max_penalty)


class _SoftOverlongPunishment:
    __name__ = "soft_overlong_punishment_reward"

    def __init__(self, max_completion_len: int, soft_punish_cache: int) -> None:
        self.max_completion_len, self.soft_punish_cache = max_completion_len, soft_punish_cache

    def __call__(self, completion_ids: list[list[int]], **kwargs: Any) -> list[float]:
        start = self.max_completion_len - self.soft_punish_cache
        rewards = []
        for ids in completion_ids:
            n = len(ids)
            rewards.append(0.0 if n <= start else (start - n) / self.soft_punish_cache
                           if n <= self.max_completion_len else -1.0)
        return rewards


def _own_get_soft_overlong_punishment(max_completion_len: int, soft_punish_cache: int) -> Callable[..., Any]:
    """DAPO's overlong penalty: 0 up to ``max - cache`` tokens, then down to -1 at ``max``, -1 past it."""
    return _SoftOverlongPunishment(max_completion_len, soft_punish_cache)


try:  # TRL's own, when it is installed
    from trl.rewards import (accuracy_reward, get_cosine_scaled_reward, get_repetition_penalty_reward,  # type: ignore[import-not-found,unused-ignore]
                             get_soft_overlong_punishment, reasoning_accuracy_reward, think_format_reward)
except ImportError:
    accuracy_reward = _own_accuracy_reward
    reasoning_accuracy_reward = _own_reasoning_accuracy_reward
    think_format_reward = _own_think_format_reward
    get_cosine_scaled_reward = _own_get_cosine_scaled_reward
    get_repetition_penalty_reward = _own_get_repetition_penalty_reward
    get_soft_overlong_punishment = _own_get_soft_overlong_punishment
    for _fn, _name in ((_own_accuracy_reward, "accuracy_reward"), (_own_think_format_reward, "think_format_reward"),
                       (_own_reasoning_accuracy_reward, "reasoning_accuracy_reward")):
        _fn.__name__ = _fn.__qualname__ = _name  # the metric names TRL logs: rewards/accuracy_reward/mean
