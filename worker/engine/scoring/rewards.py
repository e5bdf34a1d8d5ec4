"""Reward functions: the built-ins and custom Python, called as TRL's ``GRPOTrainer`` calls them.

Custom functions get TRL's arguments (``reward_call``): ``prompts``, ``completions`` (strings for
standard data, one assistant message for conversational data), ``completion_ids``,
``trainer_state`` and every dataset column, plus the optional extras they name. The built-ins get
the completion texts (thinking included; decoded without the final stop token) and every extra.
Each returns ``list[float | None]``; ``None`` means "not applicable" and is left out of the sum.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import json
import math
import re
import sys
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import msgspec

from grpo_tui.common import preflight
from grpo_tui.common.reward_names import EXTRAS, argument_problem
from grpo_tui.protocol.config import RewardConfig
from grpo_tui.protocol.outcome import Mistake
from grpo_tui.worker.engine.prompts import reasoning_gym_source
from grpo_tui.worker.engine.scoring import schema_check, timed_calls
from grpo_tui.worker.engine.prompts.data import Example, columns_for
from grpo_tui.worker.engine.policy.parsing import extract_answer, parse_number, parse_tool_calls, split_thinking
from grpo_tui.worker.engine.scoring.reward_call import Signature, StepLog, TrainerState, call_arguments, tool_conversation, trl_completions
from grpo_tui.worker.trainer_contract import SaidFailure

if TYPE_CHECKING:
    from grpo_tui.worker.engine.policy.rollout import Completion

RewardFn = Callable[..., Any]


class RewardError(Mistake, RuntimeError):
    """A reward that cannot be used as configured (its file does not import, no such function, a
    signature TRL's arguments do not fit, values that are not one number per completion): a fixable
    mistake whose message names it."""

    def __init__(self, sentence: str) -> None:
        super().__init__("reward", sentence)


class RewardFailed(Mistake, RuntimeError):
    """A user's reward function raised, hung past its ``timeout_s``, called ``sys.exit`` or was
    interrupted while scoring: the user's code to fix (or to mark ``on_error = "skip"``), so a
    mistake (exit 2, never restarted) whose sentence names the function, its file and line and
    the exception; the traceback goes to the run's log."""

    def __init__(self, sentence: str) -> None:
        super().__init__("reward", sentence)


class BuiltinRewardFailed(SaidFailure):
    """A built-in reward or a judge model failed while scoring: grpo-tui's code or the machine, a
    crash (restarted from the latest checkpoint); the message names the reward."""


# Training computes in float32: a score beyond its range becomes inf in the advantages.
FLOAT32_MAX = 3.4028234663852886e38


# ---------------------------------------------------------------- built-ins


def accuracy(prompts: list, completions: list[str], answer: list | None = None, **_: Any) -> list[float | None]:
    """1.0 when the final answer equals the dataset ``answer``, else 0.0 (``None`` without an answer).

    The final answer is the last ``<answer>…</answer>`` content of the text after thinking, or else
    its last number. Both sides are compared as numbers (|a − b| ≤ 1e-6 · max(1, |b|)) when both parse
    as numbers, else as case-folded stripped strings.
    """
    answers = answer if answer is not None else [None] * len(completions)
    scores: list[float | None] = []
    for text, expected in zip(completions, answers):
        if expected is None:
            scores.append(None)
            continue
        got = extract_answer(split_thinking(text)[1])
        if got is None:
            scores.append(0.0)
            continue
        a, b = parse_number(got), parse_number(expected)
        if a is not None and b is not None:
            scores.append(float(abs(a - b) <= 1e-6 * max(1.0, abs(b))))
        else:
            scores.append(float(got.strip().casefold() == str(expected).strip().casefold()))
    return scores


def xml_format(prompts: list, completions: list[str], tags: list[str] | None = None, **_: Any) -> list[float]:
    """Format score in [0, 1]: ``(1/K) Σ_tag [exactly one <tag>…</tag> pair in the answer]``, times
    0.5 when anything but whitespace follows the last closing tag. ``tags`` (params) defaults to
    ``["answer"]``; ``"think"`` checks the thinking block instead (its ``</think>`` must be present).
    """
    tags = tags or ["answer"]
    scores = []
    for text in completions:
        thinking, answer = split_thinking(text)
        ok = 0
        for tag in tags:
            if tag == "think":
                ok += thinking is not None and text.count("</think>") == 1
            else:
                ok += len(re.findall(rf"<{tag}>.*?</{tag}>", answer, re.DOTALL)) == 1 and answer.count(f"<{tag}>") == 1
        score = ok / len(tags)
        closers = [answer.rfind(f"</{t}>") + len(t) + 3 for t in tags if t != "think" and f"</{t}>" in answer]
        if closers and answer[max(closers) :].strip():
            score *= 0.5
        scores.append(score)
    return scores


def length(
    prompts: list,
    completions: list[str],
    *,
    num_tokens: list[int],
    max_completion_length: int,
    target: int | None = None,
    min_length: int | None = None,
    max_length: int | None = None,
    unit: str = "tokens",
    **_: Any,
) -> list[float]:
    """Length score in [0, 1] of each completion's length n (params: ``target``, or a band).

    A band (``min_length`` and/or ``max_length``, mlx-node's ``Length`` reward; ``unit`` is
    ``"tokens"`` or ``"chars"``): 1 inside it, ``n / min_length`` below it, ``1 − ½·min(1, (n −
    max_length) / max_length)`` above it. Else, in tokens: with ``target``, ``max(0, 1 − |n − target|
    / target)`` (closest to the target is best); without, ``1 − n / max_completion_length`` (shorter
    is better).
    """
    if min_length is not None or max_length is not None:
        sizes = [len(c) for c in completions] if unit == "chars" else list(num_tokens)
        return [_in_band(n, min_length or 0, max_length) for n in sizes]
    if target is None:
        return [max(0.0, 1.0 - n / max_completion_length) for n in num_tokens]
    return [max(0.0, 1.0 - abs(n - target) / max(target, 1)) for n in num_tokens]


def _in_band(n: int, low: int, high: int | None) -> float:
    if n < low:
        return n / low
    if high is not None and n > high:
        return 1.0 - 0.5 * min(1.0, (n - high) / max(high, 1))
    return 1.0


def tool_use(
    prompts: list,
    completions: list[str],
    tools: list | None = None,
    required: bool = False,
    allowed_tools: list[str] | None = None,
    **_: Any,
) -> list[float | None]:
    """Share of well-formed tool calls: ``(# calls with status ok [and name allowed]) / (# calls)``.

    A completion without any ``<tool_call>`` scores ``0.0`` when ``required`` (params) is true, else
    ``None`` (not applicable). The allowed names are ``allowed_tools`` (params: a list of names), else
    the function names of the row's ``tools`` column (its tool schemas), else any name.
    """
    scores: list[float | None] = []
    for i, text in enumerate(completions):
        calls = parse_tool_calls(split_thinking(text)[1])
        if not calls:
            scores.append(0.0 if required else None)
            continue
        allowed = set(allowed_tools) if allowed_tools is not None else _allowed_names(tools, i, len(completions))
        good = sum(c.status == "ok" and (allowed is None or c.name in allowed) for c in calls)
        scores.append(good / len(calls))
    return scores


def _allowed_names(tools: list | None, i: int, n: int) -> set[str] | None:
    if tools is None:
        return None
    if len(tools) == n and all(t is None or isinstance(t, list) for t in tools):  # the tools column
        row = tools[i]
        if row is None:
            return None
        return {str((t.get("function") or t).get("name")) for t in row if isinstance(t, dict)}
    return {str(t) for t in tools}


def json_schema(
    prompts: list,
    completions: list[str],
    schema: dict | bool | None = None,
    tag: str | None = None,
    log_extra: Callable[[str, list], None] | None = None,
    **_: Any,
) -> list[float]:
    """1.0 when the answer holds JSON that matches ``schema`` (params), 0.5 when it parses but does
    not match, 0.0 when there is no JSON. The JSON is the ``<tag>`` content when ``tag`` is given, else
    the whole answer text, else its outermost ``{…}``/``[…]`` span. Validation is ``jsonschema``'s, in
    the draft the schema names (``$schema``), else the newest; why a completion did not match goes
    to its notes (``log_extra``).
    """
    validator = None if schema is None else _validator(schema)
    scores: list[float] = []
    notes: list[str | None] = []
    for text in completions:
        value = _find_json(split_thinking(text)[1], tag)
        problems = [] if value is _MISSING or validator is None else schema_check.errors(validator, value)
        scores.append(0.0 if value is _MISSING else 0.5 if problems else 1.0)
        notes.append("no JSON found" if value is _MISSING else "; ".join(problems) or None)
    if log_extra is not None:
        log_extra("json_schema", notes)
    return scores


_MISSING = object()
_VALIDATORS: dict[str, Any] = {}


def _validator(schema: dict | bool) -> Any:
    """``schema``'s compiled validator (load_rewards checked the schema, so this does not raise)."""
    key = json.dumps(schema, sort_keys=True)
    if key not in _VALIDATORS:
        _VALIDATORS[key] = schema_check.compile_schema(schema, "params.schema")
    return _VALIDATORS[key]


def _find_json(text: str, tag: str | None) -> Any:
    if tag is not None:
        found = re.findall(rf"<{tag}>(.*?)</{tag}>", text, re.DOTALL)
        if not found:
            return _MISSING
        text = found[-1]
    candidates = [text.strip()]
    for open_, close in ("{}", "[]"):
        start, end = text.find(open_), text.rfind(close)
        if 0 <= start < end:
            candidates.append(text[start : end + 1])
    for candidate in candidates:
        try:
            return json.loads(candidate)
        except json.JSONDecodeError:
            continue
    return _MISSING


def soft_overlong(
    prompts: list,
    completions: list[str],
    *,
    completion_ids: list[list[int]],
    max_completion_length: int,
    soft_punish_cache: int,
    **_: Any,
) -> list[float]:
    """DAPO's soft overlong punishment (Eq. 13), TRL's ``get_soft_overlong_punishment``: with
    L = ``max_completion_length`` (params; else the run's), C = ``soft_punish_cache`` (params) and
    n the completion's tokens (its ``completion_ids``, tool messages included, as in TRL):
    0 for n ≤ L − C, ``(L − C − n) / C`` for L − C < n ≤ L, −1 for n > L."""
    scores = []
    for ids in completion_ids:
        n = len(ids)
        if n <= max_completion_length - soft_punish_cache:
            scores.append(0.0)
        elif n <= max_completion_length:
            scores.append((max_completion_length - soft_punish_cache - n) / soft_punish_cache)
        else:
            scores.append(-1.0)
    return scores


BUILTINS: dict[str, RewardFn] = {
    "accuracy": accuracy,
    "xml_format": xml_format,
    "length": length,
    "tool_use": tool_use,
    "json_schema": json_schema,
    "soft_overlong": soft_overlong,
    "reasoning_gym": reasoning_gym_source.reasoning_gym,  # the entry's own scorer (docs/environments.md)
}

# ---------------------------------------------------------------- custom functions


def load_function(spec: str) -> RewardFn:
    """Import ``file.py:func`` or ``module:func``."""
    target, name = spec.rsplit(":", 1)
    try:  # a syntax error or a failing import in the user's file is a reward problem: say which
        module = _import(target)
    except RewardError:
        raise
    except SyntaxError as exc:
        raise RewardError(f"reward {spec}: {preflight.syntax_error(exc)}") from exc
    except Exception as exc:  # noqa: BLE001
        raise RewardError(f"reward {spec}: cannot import {target}: {describe_error(exc)}") from exc
    fn = getattr(module, name, None)
    if not callable(fn):
        raise RewardError(f"reward {spec}: {name!r} is not a function in {target}")
    return fn


def _import(target: str) -> Any:
    if target.endswith(".pkl"):
        return _unpickle(Path(target))
    if not target.endswith(".py"):
        return importlib.import_module(target)
    path = Path(target)
    module_name = f"grpo_tui_reward_{path.stem}_{abs(hash(str(path.resolve())))}"
    module_spec = importlib.util.spec_from_file_location(module_name, path)
    if module_spec is None or module_spec.loader is None:
        raise RewardError(f"reward {target}: cannot import {path}")
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[module_name] = module
    module_spec.loader.exec_module(module)
    return module


def _unpickle(path: Path) -> Any:
    """A ``.pkl`` of ``{name: function}`` written by the Python API (``GRPOTrainer``) with
    cloudpickle: functions defined in a script or a notebook cell, closures included."""
    import types

    import cloudpickle  # a dependency of the API only; imported when a config names a .pkl

    with open(path, "rb") as f:
        functions = cloudpickle.load(f)
    if not isinstance(functions, dict):
        raise RewardError(f"{path}: not a file of pickled functions (written by GRPOTrainer)")
    return types.SimpleNamespace(**functions)


@dataclass
class Reward:
    """One configured reward function."""

    label: str
    fn: RewardFn
    weight: float
    timeout_s: float
    on_error: str
    params: dict[str, Any]
    builtin: bool
    signature: Signature = Signature(frozenset(), True)
    inline: bool = False  # called on the caller's thread, without a timeout (a judge model: MLX)
    fits: set[frozenset[str]] = field(default_factory=set)  # argument names that bind (``_check_call``)

    @classmethod
    def from_config(cls, config: RewardConfig, index: int = 0) -> "Reward":
        if config.judge is not None:
            from grpo_tui.worker.engine.scoring.judge import Judge

            judge = Judge(config.judge)
            return cls(config.label, judge, config.weight, config.timeout_s, config.on_error, {}, True,
                       Signature.of(judge), inline=True)
        fn = BUILTINS[config.name] if config.name else load_function(str(config.function))
        if config.name == "json_schema" and "schema" in config.params:  # a bad schema stops the start
            schema_check.compile_schema(config.params["schema"], f"rewards[{index}].params.schema")
        return cls(config.label, fn, config.weight, config.timeout_s, config.on_error, dict(config.params),
                   bool(config.name), Signature.of(fn))


def load_rewards(configs: list[RewardConfig]) -> list[Reward]:
    """Build every configured reward; a label used twice gets a ``#2``, ``#3``… suffix."""
    rewards: list[Reward] = []
    seen: dict[str, int] = {}
    for index, config in enumerate(configs):
        reward = Reward.from_config(config, index)
        seen[reward.label] = seen.get(reward.label, 0) + 1
        if seen[reward.label] > 1:
            reward.label = f"{reward.label}#{seen[reward.label]}"
        rewards.append(reward)
    return rewards


def call_with_timeout(fn: RewardFn, kwargs: dict[str, Any], timeout_s: float, name: str | None = None,
                      main_thread: bool = False) -> Any:
    """Run ``fn(**kwargs)`` (sync or async) in a thread of its own for at most ``timeout_s``; a hung
    call is abandoned, and a function that stays hung is no longer called (``timed_calls``).
    ``main_thread``: a synchronous ``fn`` runs on the main thread, as TRL runs reward functions."""
    return timed_calls.call(fn, kwargs, timeout_s, name or str(getattr(fn, "__name__", "function")), main_thread)


def describe_error(exc: BaseException) -> str:
    try:
        text = str(exc)
        return f"{exc.__class__.__name__}: {text}" if text else exc.__class__.__name__
    except Exception:  # noqa: BLE001 — an exception whose __str__ fails
        return exc.__class__.__name__


def user_line(fn: RewardFn, frames: list[traceback.FrameSummary]) -> str:
    """``file:line`` of the user's own frame: the innermost of ``frames`` in the function's file,
    else the line the function is defined on."""
    code = getattr(inspect.unwrap(fn), "__code__", None)
    if code is None:  # a callable object: its __call__
        code = getattr(getattr(fn, "__call__", None), "__code__", None)
    if code is None:
        return f"{frames[-1].filename}:{frames[-1].lineno}" if frames else "?"
    inside = [f for f in frames if f.filename == code.co_filename]
    return f"{code.co_filename}:{inside[-1].lineno if inside else code.co_firstlineno}"


ON_ERROR_HINT = ('fix it, or set on_error = "skip" in its [[rewards]] table if it may fail now and then '
                 "(a failed call then scores None and the run goes on)")


def failure_sentence(reward: Reward, exc: BaseException) -> str:
    """One sentence for a user's reward function that failed while scoring: what happened, where
    (the user's file and line), and what to do."""
    if isinstance(exc, timed_calls.TimedOut):
        where = user_line(reward.fn, list(exc.stack))
        return (f"reward function {reward.label!r} did not return within timeout_s = {reward.timeout_s:g} s (it was "
                f"at {where}); make it faster or raise timeout_s, or set on_error = \"skip\" in its [[rewards]] "
                "table if it may hang now and then (a timed-out call then scores None and the run goes on)")
    where = user_line(reward.fn, traceback.extract_tb(exc.__traceback__))
    if isinstance(exc, timed_calls.StillHung):
        return f"reward function {reward.label!r} ({where}): {exc}; {ON_ERROR_HINT}"
    if isinstance(exc, SystemExit):
        return (f"reward function {reward.label!r} called sys.exit({exc.code!r}) at {where}, which would end the "
                f"run; {ON_ERROR_HINT}")
    return f"reward function {reward.label!r} raised {describe_error(exc)} at {where}; {ON_ERROR_HINT}"


def _validate(values: Any, n: int) -> list[float | None]:
    """One float (or None) per completion; what is wrong otherwise, as the end of a sentence. As in
    TRL, NaN means None (not applicable) and an array (numpy's, a tensor) counts as a list."""
    if not isinstance(values, (list, tuple)) and callable(getattr(values, "tolist", None)):
        values = values.tolist()
    if not isinstance(values, (list, tuple)):
        raise ValueError(f"returned a {type(values).__name__}, not a list of {n} numbers (one per completion)")
    if len(values) != n:
        raise ValueError(f"returned {len(values)} scores for {n} completions; return one number (or None) per completion")
    out: list[float | None] = []
    for i, v in enumerate(values):
        if v is None or (isinstance(v, float) and math.isnan(v)):
            out.append(None)
            continue
        shown = repr(v) if len(repr(v)) <= 40 else repr(v)[:37] + "..."
        if isinstance(v, (str, bytes)) or (not isinstance(v, (int, float)) and not hasattr(v, "__float__")):
            raise ValueError(f"returned {shown} for completion {i}; return numbers (or None), not {type(v).__name__}")
        try:
            value, shown = float(v), format(float(v), "g")
        except OverflowError:  # an int beyond any float
            value, shown = math.inf, f"an integer of {len(str(abs(v)))} digits"
        except (TypeError, ValueError):
            raise ValueError(f"returned {shown} for completion {i}, which is not a number") from None
        if math.isnan(value):  # a numpy or other float type's NaN
            out.append(None)
            continue
        if not math.isfinite(value) and not shown.startswith("an integer"):
            raise ValueError(f"returned {value} for completion {i}; return finite numbers (or None)")
        if abs(value) > FLOAT32_MAX:
            raise ValueError(
                f"returned {shown} for completion {i}, which overflows float32 (the training's precision, "
                "at most 3.4e38); scale the reward down"
            )
        out.append(value)
    return out


def check_arguments(rewards: list[Reward], columns: set[str], data: str) -> None:
    """Before step 1: every named parameter of a custom reward is filled by TRL's arguments, a column
    of the data, an extra or its ``params`` (``common/reward_names.py``); else a mistake naming it."""
    for reward in rewards:
        if reward.builtin:
            continue
        try:
            parameters = inspect.signature(reward.fn).parameters.values()
        except (TypeError, ValueError):  # a builtin or C function: the call says
            continue
        named = [(p.name, p.default is not p.empty) for p in parameters
                 if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
        code = getattr(inspect.unwrap(reward.fn), "__code__", None)
        where = f"{code.co_filename}:{code.co_firstlineno}" if code is not None else str(reward.label)
        if problem := argument_problem(reward.label, where, named, columns, set(reward.params), data):
            raise RewardError(problem)


def _check_call(reward: Reward, kwargs: dict[str, Any]) -> None:
    """A user function whose parameters cannot take TRL's arguments is a mistake in its file, said
    before the call (its TypeError would look like a failure inside it). Checked once per set of names."""
    names = frozenset(kwargs)
    if reward.builtin or names in reward.fits:
        return
    try:
        parameters = inspect.signature(reward.fn)
    except (TypeError, ValueError):  # a builtin or C function: let the call say
        return
    try:
        parameters.bind(**kwargs)
    except TypeError as exc:
        raise RewardError(
            f"reward function {reward.label!r} cannot take the arguments TRL passes ({exc}); give it the "
            f"parameters it uses and **kwargs, e.g. def {getattr(reward.fn, '__name__', 'reward')}(completions, **kwargs)"
        ) from None
    reward.fits.add(names)


def score(
    rewards: list[Reward],
    prompts: list,
    completions: list[str],
    columns: dict[str, list],
    extras: dict[str, Any],
    warn: Callable[[str], None],
    *,
    completion_ids: list[list[int]] | None = None,
    trainer_state: TrainerState | None = None,
    log: StepLog | None = None,
    conversations: list[list[dict[str, Any]]] | None = None,
) -> tuple[list[float | None], dict[str, list[float | None]]]:
    """Call every reward; return (weighted sums, per-function scores).

    The weighted sum ignores ``None``; a completion no function applies to gets ``None``. The
    built-ins get the texts and every ``extras`` entry; custom functions get TRL's arguments and the
    ``common/reward_names.EXTRAS`` they take. ``log`` collects ``log_metric`` / ``log_extra`` values.
    ``conversations`` (agent rollouts): each completion's messages, which custom functions get as
    ``completions`` (TRL's shape for tool use); the built-ins keep the model's text.
    """
    n = len(completions)
    log = log or StepLog(n, warn)
    ids = completion_ids if completion_ids is not None else [[] for _ in completions]
    state = trainer_state or TrainerState(0, 0.0, 0, 1)
    trl_shaped = conversations if conversations is not None else trl_completions(prompts, completions)
    custom_extras = {k: v for k, v in extras.items() if k in EXTRAS}
    per_fn: dict[str, list[float | None]] = {}
    for reward in rewards:
        kwargs = call_arguments(
            reward.signature, label=reward.label, prompts=prompts,
            completions=completions if reward.builtin else trl_shaped, completion_ids=ids, trainer_state=state,
            columns=columns, extras=extras if reward.builtin else custom_extras, log=log, params=reward.params,
        )
        _check_call(reward, kwargs)
        try:
            returned = reward.fn(**kwargs) if reward.inline else call_with_timeout(
                reward.fn, kwargs, reward.timeout_s, f"reward {reward.label!r}", main_thread=True)
        except (Exception, SystemExit, KeyboardInterrupt) as exc:  # noqa: BLE001 — sys.exit() in user code too
            if reward.on_error != "skip":
                if reward.builtin:
                    raise BuiltinRewardFailed(f"reward function {reward.label!r} failed: {describe_error(exc)}") from exc
                raise RewardFailed(failure_sentence(reward, exc)) from exc
            warn(f"reward function {reward.label!r} failed: {describe_error(exc)} (on_error = skip: scored None)")
            returned = [None] * n
        try:
            values = _validate(returned, n)
        except ValueError as exc:
            message = f"reward function {reward.label!r} {exc}"
            if reward.on_error != "skip":
                raise RewardError(message) from None
            warn(message + " (on_error = skip: scored None)")
            values = [None] * n
        per_fn[reward.label] = values
    totals: list[float | None] = []
    for i in range(n):
        parts = [(r.weight, per_fn[r.label][i]) for r in rewards]
        present = [w * v for w, v in parts if v is not None]
        totals.append(sum(present) if present else None)
    return totals, per_fn


def score_completions(rewards: list[Reward], owners: list[Example], completions: list[Completion],
                      state: TrainerState, max_completion_length: int, *, with_tools: bool,
                      environments: list[Any] | None = None,
                      warn: Callable[[str], None]) -> tuple[list[float | None], dict[str, list[float | None]], StepLog]:
    """Score rollout completions (each of prompt ``owners[i]``) as TRL's trainer does: (weighted
    sums, per-function scores, what the functions logged). The extras are worked out here from the
    completions: the thinking split off, the tool calls parsed, the token counts."""
    parsed = [split_thinking(c.text) for c in completions]
    extras: dict[str, Any] = {
        "finish_reason": [c.finish_reason for c in completions],
        "thinking": [thinking for thinking, _ in parsed],
        "completion_answer": [answer for _, answer in parsed],
        "tool_calls": [[msgspec.to_builtins(t) for t in parse_tool_calls(answer)] for _, answer in parsed],
        "num_tokens": [c.model_tokens for c in completions],
        "prompt_tokens": [len(e.prompt_ids) for e in owners],
        "max_completion_length": max_completion_length,  # built-ins only
    }
    logged = StepLog(len(completions), warn)
    conversations = None
    if environments is not None:  # [environment]: each completion's instance (TRL's `environments`)
        extras["environments"] = environments[:len(completions)]
    if with_tools:
        extras["num_tool_calls"] = [sum(t.role == "tool" for t in c.turns) for c in completions]
        extras["failed_tool_calls"] = [sum(t.role == "tool" and t.error is not None for t in c.turns)
                                       for c in completions]
        conversations = [tool_conversation(c.turns) for c in completions]
    totals, per_fn = score(
        rewards, [e.prompt for e in owners], [c.text for c in completions], columns_for(owners),
        extras, warn, completion_ids=[list(c.token_ids) for c in completions], trainer_state=state, log=logged,
        conversations=conversations,
    )
    return totals, per_fn, logged
