"""TRL's ``environment_factory`` (``[environment] class = "env.py:Name"``; docs/environments.md).

One instance per rollout: before a round's rollout every row's ``group_size`` instances are built
(with ``args``) and reset with the row's columns (``reset(**row)``); the text ``reset`` returns is
appended to the prompt's last user message, and the instance's public methods (all but ``reset``
and ``get_reward``) are that rollout's tools, their schemas from signatures and docstrings as
``[[tools]]``'. The rollout is the agent rollout (``agent.generate``, with one tool table per row),
so tool results are masked from the loss and every call is bounded by ``timeout_s``. An optional
``get_reward()`` scores the episode once it ended, as a reward column named after the class
(weight 1, as TRL has it).

Python's ``random`` (and numpy's global generator) is seeded from (seed, step, row) before each
reset, the same for the G instances of a row: a row's G rollouts start from the same state (the
group's baseline is fair, TRL's note on self-sampling environments), the prompt is shared by the
group as the engine needs, and a resumed step or another rank count resets alike. An exception or
a hang in ``reset`` becomes the text the model reads in the prompt, one in a tool method the
tool's result (as for ``[[tools]]``), one in ``get_reward`` a ``None`` score with a warning:
nothing inside the environment stops the run. A class that does not import, has no ``reset`` or
cannot be built is a mistake, said at load.
"""

from __future__ import annotations

import inspect
import json
import random
from dataclasses import dataclass, replace
from typing import Any, Callable

from grpo_tui.protocol.config_environments import EnvironmentConfig
from grpo_tui.protocol.messages import Turn
from grpo_tui.protocol.outcome import Mistake
from grpo_tui.worker.engine import data
from grpo_tui.worker.engine.rewards import RewardError, call_with_timeout, describe_error, load_function
from grpo_tui.worker.engine.timed_calls import StillHung
from grpo_tui.worker.engine.tool_schema import SchemaError, function_schema
from grpo_tui.worker.engine.tools import RowTools, Tool, cap

RESERVED = ("reset", "get_reward", "respond")


class EnvironmentMistake(Mistake, RuntimeError):
    """An ``[environment]`` class that cannot be used, a fixable mistake naming ``environment.class``."""

    def __init__(self, sentence: str) -> None:
        super().__init__("tool", f"environment.class: {sentence}")


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        return str(value)


def _methods(instance: Any) -> list[Callable[..., Any]]:
    return [m for name, m in inspect.getmembers(instance, predicate=inspect.ismethod)
            if name not in RESERVED and not name.startswith("_")]


@dataclass
class Episode:
    """One rollout's environment instance and its tools."""

    instance: Any
    tools: list[Tool]


class Environment:
    """The configured class, checked at load; ``begin`` starts a round's episodes."""

    def __init__(self, config: EnvironmentConfig) -> None:
        self.config = config
        spec = config.class_
        try:
            self.factory = load_function(spec)  # a class is callable
        except RewardError as exc:
            raise EnvironmentMistake(str(exc).removeprefix("reward ").removeprefix(f"{spec}: ")) from None
        self.name = getattr(self.factory, "__name__", spec.rsplit(":", 1)[1])
        if not callable(getattr(self.factory, "reset", None)):
            raise EnvironmentMistake(f"{self.name} ({spec}) has no reset method; TRL's environments define "
                                    f"reset(self, **kwargs) -> str | None, called at the start of each rollout")
        probe = self._build()
        self.has_reward = callable(getattr(probe, "get_reward", None))
        self.probe_tools: list[Tool] = []  # the tools by name, for the log (each rollout gets its own)
        self.schemas = []
        for method in _methods(probe):
            try:
                self.schemas.append(function_schema(method))
            except SchemaError as exc:
                raise EnvironmentMistake(f"{self.name}.{method.__name__}: {exc}") from None
            if not (inspect.getdoc(method) or "").strip():
                raise EnvironmentMistake(f"{self.name}.{method.__name__} has no docstring; a tool method needs one "
                                        f"(it is the tool's description the model reads)")
        self.probe_tools = self._tools(probe)

    def _build(self) -> Any:
        try:
            return self.factory(**self.config.args)
        except Exception as exc:  # noqa: BLE001 — the user's constructor: say what it raised
            raise EnvironmentMistake(f"{self.name}(**environment.args) raised {describe_error(exc)}") from None

    def _tools(self, instance: Any) -> list[Tool]:
        return [Tool(s["function"]["name"], m, self.config.timeout_s, s)
                for m, s in zip(_methods(instance), self.schemas)]

    def _call(self, method: str, fn: Callable[[], Any]) -> Any:
        """``fn()`` bounded by ``timeout_s``; what went wrong as the ``Error: ...`` text the model reads."""
        try:
            return call_with_timeout(fn, {}, self.config.timeout_s, f"{self.name}.{method}")
        except StillHung as exc:
            return f"Error: {exc}"
        except TimeoutError:
            return f"Error: {self.name}.{method} timed out after {self.config.timeout_s:g}s"
        except (Exception, SystemExit, KeyboardInterrupt) as exc:  # noqa: BLE001
            return f"Error: {self.name}.{method} raised {describe_error(exc)}"

    def responder(self, instance: Any) -> Callable[[str], Turn | None] | None:
        """An episode's ``respond(message)`` as the agent rollout calls it (None: the class has none)."""
        if instance is None or not callable(getattr(instance, "respond", None)):
            return None

        def respond(message: str) -> Turn | None:
            said = self._call("respond", lambda: instance.respond(message))
            return None if said is None else Turn(role="user", content=cap(_text(said)))

        return respond

    def _reset(self, instance: Any, row: dict[str, Any], key: int) -> str | None:
        random.seed(key)
        try:
            import numpy as np

            np.random.seed(key % 2**32)
        except ImportError:  # pragma: no cover — numpy is a dependency of MLX
            pass
        said = self._call("reset", lambda: instance.reset(**row))
        return None if said is None else cap(_text(said))

    def begin(self, examples: list[data.Example], group_size: int, keys: list[int],
              render: Callable[[list[data.Example]], None]) -> tuple[list[data.Example], list[Episode]]:
        """The round's examples with each one's reset text in its prompt (rendered by ``render``),
        and ``group_size`` episodes per example, in rollout order. ``keys``: one per example."""
        episodes: list[Episode] = []
        started: list[data.Example] = []
        for example, key in zip(examples, keys):
            row = {"prompt": example.prompt, **example.columns}
            said = None
            for _ in range(group_size):
                instance = self._build_quietly()
                text = self._reset(instance, row, key) if instance is not None else f"Error: {self._broken}"
                said = text if said is None else said
                episodes.append(Episode(instance, self._tools(instance) if instance is not None else []))
            messages = [dict(m) for m in example.messages]
            if said is not None:
                last = max(i for i, m in enumerate(messages) if m["role"] == "user") if any(
                    m["role"] == "user" for m in messages) else len(messages) - 1
                messages[last] = {**messages[last], "content": str(messages[last].get("content") or "") + said}
            started.append(replace(example, messages=messages, tools=[*(example.tools or []), *self.schemas] or None,
                                   prompt_ids=[], prompt_text=""))
        render(started)
        return started, episodes

    _broken = ""

    def _build_quietly(self) -> Any:
        """An instance, or None when the constructor raised mid-run (the model reads why)."""
        try:
            return self.factory(**self.config.args)
        except Exception as exc:  # noqa: BLE001
            self._broken = f"{self.name}(**environment.args) raised {describe_error(exc)}"
            return None

    def rewards(self, episodes: list[Episode], warn: Callable[[str], None]) -> list[float | None]:
        """Each episode's ``get_reward()``; None where it raised, hung or gave no number."""
        scores: list[float | None] = []
        for episode in episodes:
            if episode.instance is None:
                scores.append(None)
                continue
            try:
                value = call_with_timeout(episode.instance.get_reward, {}, self.config.timeout_s, f"{self.name}.get_reward")
                scores.append(None if value is None else float(value))
            except (Exception, SystemExit, KeyboardInterrupt) as exc:  # noqa: BLE001
                warn(f"{self.name}.get_reward failed: {describe_error(exc)} (scored None)")
                scores.append(None)
        return scores


# ---------------------------------------------------------------- the trainer's three calls


def start(environment: Environment | None, examples: list[data.Example], step: int, round_: int, seed: int,
          batch_size: int, group_size: int, render: Callable[[list[data.Example]], None],
          ) -> tuple[list[data.Example], list[Episode] | None]:
    """A round's examples as its episodes see them (unchanged without an environment), and the episodes."""
    if environment is None:
        return examples, None
    keys = [((seed * 1_000_003 + step) * 10_007 + round_ * batch_size + i) % 2**63 for i in range(len(examples))]
    return environment.begin(examples, group_size, keys, render)


def row_tools(environment: Environment | None, episodes: list[Episode] | None, tools: list[Tool], rows: range,
              group_size: int) -> list[RowTools] | None:
    """Each rollout's tools (the ``[[tools]]`` and its episode's methods) and its ``respond``, for
    ``rows``' rollouts."""
    if environment is None or episodes is None:
        return None
    chosen = [episodes[i * group_size + g] for i in rows for g in range(group_size)]
    return [RowTools({t.name: t for t in [*tools, *e.tools]}, environment.responder(e.instance)) for e in chosen]


def add_rewards(environment: Environment | None, episodes: list[Episode] | None, first: int,
                totals: list[float | None], per_fn: dict[str, list[float | None]], warn: Callable[[str], None],
                ) -> tuple[list[float | None], dict[str, list[float | None]]]:
    """``get_reward``'s column (weight 1, named after the class) added to the scores of the
    completions of ``episodes[first:]``."""
    if environment is None or episodes is None or not environment.has_reward:
        return totals, per_fn
    scores = environment.rewards(episodes[first:first + len(totals)], warn)
    summed = [t if s is None else (s if t is None else t + s) for t, s in zip(totals, scores)]
    return summed, {**per_fn, environment.name: scores}
