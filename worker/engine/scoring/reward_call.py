"""The arguments a reward function receives: TRL's ``GRPOTrainer`` contract, plus optional extras.

TRL calls ``fn(prompts=…, completions=…, completion_ids=…, trainer_state=…, **columns)``:

- ``prompts``: the dataset prompts as given (a string, or a list of chat messages);
- ``completions``: for standard (string) prompts the completion text; for conversational prompts a
  one-message list ``[{"role": "assistant", "content": text}]`` (a trailing assistant message in the
  prompt is a prefill, and its content is put in front, as TRL does);
- ``completion_ids``: the generated token ids (the stop token included when the model stopped);
- ``trainer_state``: an object with at least ``global_step`` (optimizer steps done before this
  one) and ``epoch`` (a float: how far through the epochs);
- every other dataset column, one entry per completion.

A function written for TRL runs unchanged. Extras TRL does not have are passed only to functions
that name them or take ``**kwargs`` (``common/reward_names.EXTRAS``), so a strict TRL signature never
sees an unexpected argument; no extra shares a name with a likely column, and a named parameter
that nothing fills is a mistake said before step 1 (``common/reward_names.py``).
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class TrainerState:
    """The fields of ``transformers.TrainerState`` that reward functions read."""

    global_step: int  # optimizer steps completed before this one (TRL scores before it updates)
    epoch: float  # global_step / steps per epoch
    max_steps: int
    num_train_epochs: int

    @classmethod
    def before_step(cls, step: int, steps_per_epoch: int, max_steps: int, num_epochs: int) -> "TrainerState":
        """The state while 1-based ``step`` is being scored."""
        return cls(step - 1, (step - 1) / max(steps_per_epoch, 1), max_steps, num_epochs)


def is_conversational(prompt: Any) -> bool:
    """TRL's test: a prompt given as a list of ``{"role", "content"}`` messages."""
    return isinstance(prompt, list) and all(isinstance(m, dict) and "role" in m for m in prompt)


def trl_completions(prompts: Sequence[Any], texts: Sequence[str]) -> list[Any]:
    """Completions in TRL's shape: strings for standard prompts, one assistant message for
    conversational prompts (with the prompt's trailing assistant prefill in front of the text)."""
    out: list[Any] = []
    for prompt, text in zip(prompts, texts):
        if not is_conversational(prompt):
            out.append(text)
            continue
        last = prompt[-1] if prompt else {}
        bootstrap = last.get("content", "") if last.get("role") == "assistant" else ""
        out.append([{"role": "assistant", "content": f"{bootstrap or ''}{text}"}])
    return out


def tool_conversation(turns: Sequence[Any]) -> list[dict[str, Any]]:
    """An agent completion's turns (``protocol.messages.Turn``) as TRL hands tool-using
    completions to reward functions: assistant messages (with ``tool_calls`` when the turn called
    one) and ``tool`` messages with the results."""
    messages: list[dict[str, Any]] = []
    for turn in turns:
        if turn.role in ("assistant", "user"):  # user: an environment's reply (respond)
            messages.append({"role": turn.role, "content": turn.content})
            continue
        call = {"type": "function", "function": {"name": turn.name, "arguments": turn.arguments}}
        if messages and messages[-1]["role"] == "assistant":
            messages[-1].setdefault("tool_calls", []).append(call)
        messages.append({"role": "tool", "name": turn.name, "content": turn.content})
    return messages


@dataclass(frozen=True)
class Signature:
    """Which keyword arguments a function takes."""

    names: frozenset[str]
    any_keyword: bool  # it has **kwargs

    @classmethod
    def of(cls, fn: Callable[..., Any]) -> "Signature":
        try:
            params = inspect.signature(fn).parameters.values()
        except (TypeError, ValueError):  # a builtin or C callable: pass TRL's arguments only
            return cls(frozenset(), False)
        names = frozenset(p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY))
        return cls(names, any(p.kind is p.VAR_KEYWORD for p in params))

    def takes(self, name: str) -> bool:
        return self.any_keyword or name in self.names


@dataclass
class StepLog:
    """What reward functions log during one step: ``log_metric`` scalars (averaged per step) and
    ``log_extra`` texts (one per completion)."""

    n: int
    warn: Callable[[str], None] = lambda message: None
    metrics: dict[str, list[float]] = field(default_factory=dict)
    extras: dict[str, list[str | None]] = field(default_factory=dict)

    def metric_logger(self, label: str) -> Callable[[str, float], None]:
        def log_metric(name: str, value: float) -> None:
            try:
                number = float(value)
            except (TypeError, ValueError):
                self.warn(f"reward {label!r}: log_metric({name!r}, {value!r}) is not a number; ignored")
                return
            if math.isfinite(number):  # a NaN would poison the step's mean
                self.metrics.setdefault(str(name), []).append(number)

        return log_metric

    def extra_logger(self, label: str) -> Callable[[str, Sequence[Any]], None]:
        def log_extra(name: str, values: Sequence[Any]) -> None:
            values = list(values)
            if len(values) != self.n:
                self.warn(f"reward {label!r}: log_extra({name!r}) got {len(values)} values for {self.n} completions; ignored")
                return
            self.extras[str(name)] = [None if v is None else str(v) for v in values]

        return log_extra

    def metric_means(self) -> dict[str, float]:
        return {name: sum(v) / len(v) for name, v in self.metrics.items() if v}

    def notes(self, i: int) -> dict[str, str]:
        """Completion ``i``'s ``log_extra`` texts."""
        return {name: note for name, values in self.extras.items() if (note := values[i]) is not None}


def call_arguments(
    signature: Signature,
    *,
    label: str,
    prompts: list[Any],
    completions: list[Any],
    completion_ids: list[list[int]],
    trainer_state: TrainerState,
    columns: dict[str, list[Any]],
    extras: dict[str, Any],
    log: StepLog,
    params: dict[str, Any],
) -> dict[str, Any]:
    """One call's keyword arguments, in precedence order: ``prompts`` and ``completions``, the
    other TRL arguments and the optional extras the function takes, the dataset columns (TRL passes them all, so they beat an extra of the same
    name), then the reward's configured ``params``."""
    kwargs: dict[str, Any] = {"prompts": prompts, "completions": completions}
    loggers = {"log_metric": log.metric_logger(label), "log_extra": log.extra_logger(label)}
    # completion_ids and trainer_state are TRL's, so every TRL function takes them (by name or
    # **kwargs); offering them only where taken keeps older ``fn(prompts, completions, answer)``
    # functions working.
    optional = {"completion_ids": completion_ids, "trainer_state": trainer_state, **extras, **loggers}
    for name, value in optional.items():
        if signature.takes(name):
            kwargs[name] = value
    kwargs.update(columns)
    kwargs.update(params)
    return kwargs
