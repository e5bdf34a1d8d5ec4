"""TRL's ``environment_factory`` (``[environment] class = "env.py:Name"``; docs/environments.md).

One instance per rollout: before a round's rollout every row's ``group_size`` instances are taken
from a pool (built with ``args`` when the pool has too few, reused round after round, as TRL's) and reset with the row's columns (``reset(**row)``); the text ``reset`` returns is
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
import random
from dataclasses import dataclass, replace
from typing import Any, Callable

from grpo_tui.protocol.config_environments import EnvironmentConfig
from grpo_tui.protocol.messages import Turn
from grpo_tui.protocol.outcome import Mistake
from grpo_tui.worker.engine.prompts import data
from grpo_tui.worker.engine.scoring.rewards import RewardError, call_with_timeout, describe_error, load_function
from grpo_tui.worker.engine.scoring.timed_calls import StillHung
from grpo_tui.worker.engine.scoring.tool_schema import SchemaError, function_schema
from grpo_tui.worker.engine.scoring.tools import RowTools, Tool, as_text, cap

RESERVED = ("reset", "get_reward", "respond")


class EnvironmentMistake(Mistake, RuntimeError):
    """An ``[environment]`` class that cannot be used, a fixable mistake naming ``environment.class``."""

    def __init__(self, sentence: str, key: str = "environment.class") -> None:
        super().__init__("tool", f"{key}: {sentence}")


def _methods(instance: Any) -> list[Callable[..., Any]]:
    return [m for name, m in inspect.getmembers(instance, predicate=inspect.ismethod)
            if name not in RESERVED and not name.startswith("_")]


@dataclass
class Episode:
    """One rollout's environment instance, its tools and its class."""

    instance: Any
    tools: list[Tool]
    env: "Environment"


class Environment:
    """One configured class, checked at load; ``begin`` starts a row's episodes."""

    def __init__(self, spec: str, args: dict[str, Any], timeout_s: float, key: str = "environment.class") -> None:
        self.spec, self.args, self.timeout_s, self.key = spec, args, timeout_s, key
        try:
            self.factory = load_function(spec)  # a class is callable
        except RewardError as exc:
            raise EnvironmentMistake(str(exc).removeprefix("reward ").removeprefix(f"{spec}: "), key) from None
        self.name = getattr(self.factory, "__name__", spec.rsplit(":", 1)[1])  # how messages name it
        probe = self._build()
        if not callable(getattr(probe, "reset", None)):
            raise EnvironmentMistake(f"{self.name} ({spec}) has no reset method; TRL's environments define "
                                     f"reset(self, **kwargs) -> str | None, called at the start of each rollout", key)
        self.has_reward = callable(getattr(probe, "get_reward", None))
        self.kind = type(probe)  # get_reward's column scores the episodes of this type (TRL: exact type)
        self.probe_tools: list[Tool] = []  # the tools by name, for the log (each rollout gets its own)
        self.schemas = []
        for method in _methods(probe):
            if not (inspect.getdoc(method) or "").strip():
                raise EnvironmentMistake(f"{self.name}.{method.__name__} has no docstring; a tool method needs one "
                                         f"(it is the tool's description the model reads)", key)
            try:
                self.schemas.append(function_schema(method))
            except SchemaError as exc:
                raise EnvironmentMistake(f"{self.name}.{method.__name__}: {exc}", key) from None
        self.probe_tools = self._tools(probe)
        # Instances are pooled, as TRL pools them: built once, reset for each episode (an expensive
        # __init__ is paid once); the probe seeds the pool; a round hands them out from the first.
        self.pool: list[Any] = [probe]
        self.handed = 0

    def _build(self) -> Any:
        try:
            return self.factory(**self.args)
        except Exception as exc:  # noqa: BLE001 — the user's constructor: say what it raised
            raise EnvironmentMistake(f"{self.name}(**environment.args) raised {describe_error(exc)}", self.key) from None

    def _tools(self, instance: Any) -> list[Tool]:
        return [Tool(s["function"]["name"], m, self.timeout_s, s)
                for m, s in zip(_methods(instance), self.schemas)]

    def _call(self, method: str, fn: Callable[[], Any]) -> Any:
        """``fn()`` bounded by ``timeout_s``; what went wrong as the ``Error: ...`` text the model reads."""
        try:
            return call_with_timeout(fn, {}, self.timeout_s, f"{self.name}.{method}")
        except StillHung as exc:
            return f"Error: {exc}"
        except TimeoutError:
            return f"Error: {self.name}.{method} timed out after {self.timeout_s:g}s"
        except (Exception, SystemExit, KeyboardInterrupt) as exc:  # noqa: BLE001
            return f"Error: {self.name}.{method} raised {describe_error(exc)}"

    def responder(self, instance: Any) -> Callable[[str], Turn | None] | None:
        """An episode's ``respond(message)`` as the agent rollout calls it (None: the class has none)."""
        if instance is None or not callable(getattr(instance, "respond", None)):
            return None

        def respond(message: str) -> Turn | None:
            said = self._call("respond", lambda: instance.respond(message))
            return None if said is None else Turn(role="user", content=cap(as_text(said)))

        return respond

    def _reset(self, instance: Any, row: dict[str, Any], key: int) -> str | None:
        random.seed(key)
        try:
            import numpy as np

            np.random.seed(key % 2**32)
        except ImportError:  # pragma: no cover — numpy is a dependency of MLX
            pass
        said = self._call("reset", lambda: instance.reset(**row))
        return None if said is None else cap(as_text(said))

    def begin(self, example: data.Example, row: dict[str, Any], group_size: int,
              key: int) -> tuple[data.Example, list[Episode]]:
        """``example`` with its reset text in its prompt (not rendered yet), and its ``group_size``
        episodes, each reset with ``row`` after seeding ``random`` with ``key``."""
        episodes: list[Episode] = []
        said = None
        for _ in range(group_size):
            instance = self._next()
            text = self._reset(instance, row, key) if instance is not None else f"Error: {self._broken}"
            said = text if said is None else said
            episodes.append(Episode(instance, self._tools(instance) if instance is not None else [], self))
        messages = [dict(m) for m in example.messages]
        if said is not None:
            users = [i for i, m in enumerate(messages) if m["role"] == "user"]
            last = users[-1] if users else len(messages) - 1
            messages[last] = {**messages[last], "content": str(messages[last].get("content") or "") + said}
        return replace(example, messages=messages, tools=[*(example.tools or []), *self.schemas] or None,
                       prompt_ids=[], prompt_text=""), episodes

    _broken = ""

    def _next(self) -> Any:
        """The round's next instance from the pool, built when the pool has none left; None when the
        constructor raised mid-run (the model reads why)."""
        if self.handed < len(self.pool):
            self.handed += 1
            return self.pool[self.handed - 1]
        try:
            instance = self.factory(**self.args)
        except Exception as exc:  # noqa: BLE001
            self._broken = f"{self.name}(**environment.args) raised {describe_error(exc)}"
            return None
        self.pool.append(instance)
        self.handed += 1
        return instance

    def rewards(self, episodes: list[Episode], warn: Callable[[str], None]) -> list[float | None]:
        """Each episode's ``get_reward()``; None where it raised, hung or gave no number, and for the
        episodes of another class."""
        scores: list[float | None] = []
        for episode in episodes:
            if episode.instance is None or type(episode.instance) is not self.kind:
                scores.append(None)
                continue
            try:
                value = call_with_timeout(episode.instance.get_reward, {}, self.timeout_s, f"{self.name}.get_reward")
                scores.append(None if value is None else float(value))
            except (Exception, SystemExit, KeyboardInterrupt) as exc:  # noqa: BLE001
                warn(f"{self.name}.get_reward failed: {describe_error(exc)} (scored None)")
                scores.append(None)
        return scores


class Environments:
    """``[environment]``: one class, or TRL's dict of them (``classes``), each row choosing its own
    by its ``environment`` column (not passed to ``reset``); only that class's methods are its tools."""

    def __init__(self, config: EnvironmentConfig, enable_thinking: bool = False) -> None:
        self.thinking = enable_thinking  # the chat template's, when the prompts are rendered
        self.multi = bool(config.classes)
        if self.multi:
            self.by_name: dict[str | None, Environment] = {
                name: Environment(spec, config.args.get(name, {}), config.timeout_s, f"environment.classes.{name}")
                for name, spec in config.classes.items()}
        else:
            self.by_name = {None: Environment(str(config.class_), config.args, config.timeout_s)}
        self.probe_tools = [t for e in self.by_name.values() for t in e.probe_tools]
        self.scorers = list({e.kind: e for e in self.by_name.values() if e.has_reward}.values())  # one column per class

    def check_rows(self, examples: list[data.Example], label: str) -> None:
        """With ``classes``: every row names one of them in its ``environment`` column (a mistake before step 1)."""
        if not self.multi:
            return
        for i, example in enumerate(examples):
            name = example.columns.get("environment")
            if name not in self.by_name:
                raise Mistake("data", f"{label} row {i + 1}: environment = {name!r} is not one of environment.classes "
                                      f"({', '.join(map(repr, self.by_name))}); give every row an environment column naming one")

    def begin(self, examples: list[data.Example], group_size: int, keys: list[int],
              render: Callable[[list[data.Example]], None]) -> tuple[list[data.Example], list[Episode]]:
        """The round's examples with each one's reset text in its prompt (rendered by ``render``),
        and ``group_size`` episodes per example, in rollout order. ``keys``: one per example."""
        started: list[data.Example] = []
        episodes: list[Episode] = []
        for env in self.by_name.values():  # the last round's episodes are over: their instances are free again
            env.handed = 0
        for example, key in zip(examples, keys):
            name = example.columns.get("environment") if self.multi else None
            row = {"prompt": example.prompt, **{k: v for k, v in example.columns.items()
                                                if not (self.multi and k == "environment")}}
            one, its = self.by_name[name].begin(example, row, group_size, key)
            started.append(one)
            episodes += its
        render(started)
        return started, episodes

    def rewards(self, episodes: list[Episode], warn: Callable[[str], None]) -> dict[str, list[float | None]]:
        """``get_reward``'s columns, one per class that has it (named after the class)."""
        return {env.kind.__name__: env.rewards(episodes, warn) for env in self.scorers}


# ---------------------------------------------------------------- the trainer's three calls


def start(environment: Environments | None, examples: list[data.Example], where: tuple[int, int, int], group_size: int,
          tokenizer: Any) -> tuple[list[data.Example], list[Episode] | None]:
    """A round's examples as its episodes see them (unchanged without an environment), rendered
    with ``tokenizer``, and the episodes. ``where``: (seed, step, the first example's place in the
    step), which key the resets (an evaluation: step -1 and the eval index, the same episodes at
    every evaluation)."""
    if environment is None:
        return examples, None
    seed, step, first = where
    keys = [((seed * 1_000_003 + step) * 10_007 + first + i) % 2**63 for i in range(len(examples))]
    return environment.begin(examples, group_size, keys, lambda e: data.render(e, tokenizer, environment.thinking))


def row_tools(environment: Environments | None, episodes: list[Episode] | None, tools: list[Tool], rows: range,
              group_size: int) -> list[RowTools] | None:
    """Each rollout's tools (the ``[[tools]]`` and its episode's methods) and its ``respond``, for
    ``rows``' rollouts."""
    if environment is None or episodes is None:
        return None
    chosen = [episodes[i * group_size + g] for i in rows for g in range(group_size)]
    return [RowTools({t.name: t for t in [*tools, *e.tools]}, e.env.responder(e.instance)) for e in chosen]


def instances(episodes: list[Episode] | None, first: int) -> list[Any] | None:
    """The environment instances of the rollouts from ``first`` on: reward functions' ``environments``
    argument (TRL's), one per completion."""
    return None if episodes is None else [e.instance for e in episodes[first:]]


def add_rewards(environment: Environments | None, episodes: list[Episode] | None, first: int,
                totals: list[float | None], per_fn: dict[str, list[float | None]], warn: Callable[[str], None],
                ) -> tuple[list[float | None], dict[str, list[float | None]]]:
    """``get_reward``'s columns (weight 1, each named after its class) added to the scores of the
    completions of ``episodes[first:]``."""
    if environment is None or episodes is None or not environment.scorers:
        return totals, per_fn
    columns = environment.rewards(episodes[first:first + len(totals)], warn)
    for scores in columns.values():
        totals = [t if s is None else (s if t is None else t + s) for t, s in zip(totals, scores)]
    return totals, {**per_fn, **columns}
