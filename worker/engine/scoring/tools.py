"""Tools the model calls during its rollouts (``[[tools]]``): loading them and running one call.

A tool is user code running in the worker process with its permissions. A call never raises: every
way it can go wrong (invalid JSON, no name, an unknown tool, wrong arguments, an exception, a
timeout) becomes an error text that the model reads as the tool's result, so a bad call is
something the policy learns from, not a crash. The call runs in a thread of its own with the tool's
``timeout_s`` (a hung call is abandoned, and a tool that stays hung is not called again until one
of its calls returns: ``timed_calls``), and whatever it prints lands on stderr: the
worker keeps the real stdout for protocol frames (``frames.reserve_stdout``), and ``sys.stdout`` is
pointed at stderr during the call for the in-process case too.
"""

from __future__ import annotations

import inspect
import json
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from grpo_tui.common import preflight
from grpo_tui.protocol.config import ToolConfig
from grpo_tui.protocol.messages import ToolCall, Turn
from grpo_tui.protocol.outcome import Mistake
from grpo_tui.worker.engine.scoring.rewards import RewardError, call_with_timeout, describe_error, load_function
from grpo_tui.worker.engine.scoring.timed_calls import StillHung
from grpo_tui.worker.engine.scoring.tool_schema import SchemaError, function_schema

# A result longer than this is cut (with a note saying so): it would fill the completion budget
# and the store with one value.
MAX_RESULT_CHARS = 2000


class ToolError(Mistake, RuntimeError):
    """A configured tool that cannot be used, a fixable mistake; the message names its config key."""

    def __init__(self, sentence: str) -> None:
        super().__init__("tool", sentence)


@dataclass
class Tool:
    name: str
    fn: Callable[..., Any]
    timeout_s: float
    schema: dict[str, Any]
    sandboxed: str | None = None  # with sandbox = true: the function's spec, called in a child process


@dataclass
class RowTools:
    """One rollout's own tools (an ``[environment]`` episode's methods and the ``[[tools]]``) and its
    environment's ``respond``: a reply to a turn that called no tool, as a ``user`` turn (None: the
    episode is over)."""

    tools: dict[str, Tool]
    respond: Callable[[str], Turn | None] | None = None


def load_tools(configs: list[ToolConfig]) -> list[Tool]:
    """Import every ``[[tools]]`` function and derive its schema."""
    tools = []
    for i, config in enumerate(configs):
        key = f"tools[{i}].function"
        where, name = config.function.rsplit(":", 1)
        try:
            fn = load_function(config.function)
        except RewardError as exc:
            raise ToolError(f"{key}: {str(exc).removeprefix('reward ')}") from None
        if not (inspect.getdoc(fn) or "").strip():  # TRL's tools need one too: it is the tool's description
            raise ToolError(preflight.no_docstring(key, name, where))
        try:
            schema = function_schema(fn)
        except SchemaError as exc:
            raise ToolError(f"{key}: {where}: {exc}") from None
        schema["function"]["name"] = config.function.rsplit(":", 1)[1]  # the name the config gave
        tools.append(Tool(schema["function"]["name"], fn, config.timeout_s, schema,
                          config.function if config.sandbox else None))
    return tools


def as_text(value: Any) -> str:
    """What a tool or an environment returned, as the message's text: a string as it is, else JSON."""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        return str(value)


def cap(text: str, limit: int = MAX_RESULT_CHARS) -> str:
    """``text``, cut to ``limit`` characters with a note when longer."""
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n[result cut: {limit} of {len(text)} characters shown]"


_redirect_lock = threading.Lock()
_redirect_depth = 0
_saved_stdout: Any = None


@contextmanager
def _stdout_to_stderr() -> Iterator[None]:
    """``sys.stdout`` points at stderr while any tool call runs: calls of several rows overlap (each
    on a thread of its own), so the first one in saves the real stdout and the last one out
    restores it."""
    global _redirect_depth, _saved_stdout
    with _redirect_lock:
        if _redirect_depth == 0:
            _saved_stdout, sys.stdout = sys.stdout, sys.stderr
        _redirect_depth += 1
    try:
        yield
    finally:
        with _redirect_lock:
            _redirect_depth -= 1
            if _redirect_depth == 0 and sys.stdout is sys.stderr:
                sys.stdout = _saved_stdout


def _sandboxed(tool: Tool, arguments: dict[str, Any], turn: Turn) -> str | None:
    """One call of a ``sandbox = true`` tool in a child process (``grpo_tui.sandbox``): its result in
    ``turn``, or the error text the model reads; what it printed goes to the worker's stderr."""
    from grpo_tui.sandbox import Limits, call

    assert tool.sandboxed is not None
    result = call(tool.sandboxed, arguments, Limits(timeout_s=tool.timeout_s))
    for line in (result.stdout + result.stderr).splitlines()[-20:]:
        print(f"tool {tool.name!r} (sandboxed): {line}", file=sys.stderr)
    if result.error is not None:
        return f"{tool.name} {result.error}"
    turn.content = cap(as_text(result.value))
    return None


def run_call(tools: dict[str, Tool], call: ToolCall) -> Turn:
    """Run one parsed ``<tool_call>``; the ``tool`` turn holds its result or its error text."""
    name = call.name
    arguments = call.arguments if call.arguments is not None else {}
    turn = Turn(role="tool", content="", name=name, arguments=call.arguments)
    error: str | None = None
    if call.status == "invalid_json":
        error = f"invalid tool call JSON: {call.error}"
    elif call.status != "ok" or name is None:
        error = 'the tool call has no "name"'
    elif name not in tools:
        error = f"unknown tool {name!r} (available: {', '.join(sorted(tools)) or 'none'})"
    elif not isinstance(arguments, dict):
        error = f"wrong arguments for {name}: expected a JSON object, got {type(arguments).__name__}"
    else:
        tool = tools[name]
        try:
            inspect.signature(tool.fn).bind(**arguments)
        except TypeError as exc:
            error = f"wrong arguments for {name}: {exc}"
        except ValueError:  # a callable without a signature: let the call decide
            pass
    if error is None:
        tool = tools[str(name)]
        start = time.perf_counter()
        try:
            if tool.sandboxed is not None:
                error = _sandboxed(tool, dict(arguments), turn)
            else:
                with _stdout_to_stderr():  # a tool's print is a log line, never a frame
                    turn.content = cap(as_text(call_with_timeout(tool.fn, dict(arguments), tool.timeout_s, f"tool {name!r}")))
        except StillHung as exc:
            error = str(exc)
        except TimeoutError:
            error = f"{name} timed out after {tool.timeout_s:g}s"
        except (Exception, SystemExit, KeyboardInterrupt) as exc:  # noqa: BLE001 — sys.exit() in a tool too
            error = f"{name} raised {describe_error(exc)}"
        finally:
            turn.seconds = time.perf_counter() - start
    if error is not None:
        turn.error = cap(error)
        turn.content = f"Error: {turn.error}"
    return turn
