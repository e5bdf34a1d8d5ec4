"""[[tools]]: schemas from signatures and docstrings, loading, and every way one call can go wrong."""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from typing import Literal

import pytest

from grpo_tui.protocol.config import ToolConfig
from grpo_tui.protocol.messages import ToolCall
from grpo_tui.worker.engine.policy.parsing import parse_tool_calls
from grpo_tui.worker.engine.scoring.tool_schema import SchemaError, function_schema
from grpo_tui.worker.engine.scoring.tools import MAX_RESULT_CHARS, Tool, ToolError, load_tools, run_call


def multiply(a: int, b: int) -> int:
    """Multiply two integers.

    Args:
        a: The first factor.
        b (int): The second factor,
            on two lines.

    Returns:
        The product.
    """
    return a * b


def lookup(key: str, scale: float | None = None, mode: Literal["x", "y"] = "x", tags: list[str] = []) -> dict:  # noqa: B006
    """Look a key up.

    Args:
        key: What to look up.
        scale: A factor.
        mode: How.
        tags: Labels.
    """
    return {"key": key}


def test_the_schema_is_transformers_get_json_schema_s_shape():
    assert function_schema(multiply) == {
        "type": "function",
        "function": {
            "name": "multiply",
            "description": "Multiply two integers.",
            "parameters": {
                "type": "object",
                "properties": {
                    "a": {"type": "integer", "description": "The first factor."},
                    "b": {"type": "integer", "description": "The second factor, on two lines."},
                },
                "required": ["a", "b"],
            },
            "return": {"type": "integer", "description": "The product."},
        },
    }
    params = function_schema(lookup)["function"]["parameters"]
    assert params["required"] == ["key"]
    assert params["properties"]["scale"] == {"type": "number", "nullable": True, "description": "A factor."}
    assert params["properties"]["mode"] == {"type": "string", "enum": ["x", "y"], "description": "How."}
    assert params["properties"]["tags"] == {"type": "array", "items": {"type": "string"}, "description": "Labels."}


def test_a_parameter_the_docstring_does_not_describe_is_an_error_naming_it(tmp_path):
    (tmp_path / "t.py").write_text('def f(x: int, y: int) -> int:\n    """Add.\n\n    Args:\n        x: One.\n    """\n    return x\n')
    with pytest.raises(ToolError, match=r"^tools\[0\]\.function: .*t\.py: parameter 'y' of f has no description in its "
                                        r"docstring; add a line 'y: what it is' under 'Args:'"):
        load_tools([ToolConfig(function=f"{tmp_path / 't.py'}:f")])


def test_a_parameter_without_a_type_hint_is_an_error_naming_the_key(tmp_path):
    def untyped(a, b: int) -> int:
        """Untyped.

        Args:
            a: A.
            b: B.
        """
        return b

    with pytest.raises(SchemaError, match="'a' of untyped has no type hint"):
        function_schema(untyped)
    (tmp_path / "t.py").write_text('def f(x):\n    """F.\n\n    Args:\n        x: X.\n    """\n    return x\n')
    with pytest.raises(ToolError, match=r"^tools\[0\]\.function: .*t\.py: parameter 'x' of f has no type hint; annotate it"):
        load_tools([ToolConfig(function=f"{tmp_path / 't.py'}:f")])
    with pytest.raises(ToolError, match=r"^tools\[0\]\.function: .*'g' is not a function"):
        load_tools([ToolConfig(function=f"{tmp_path / 't.py'}:g")])


def _tools(**fns) -> dict[str, Tool]:
    return {name: Tool(name, fn, 0.5, function_schema(fn)) for name, fn in fns.items()}


def _call(text: str) -> ToolCall:
    return parse_tool_calls(text)[0]


def test_a_good_call_returns_the_result_as_text_and_its_time():
    turn = run_call(_tools(multiply=multiply), _call('<tool_call>{"name": "multiply", "arguments": {"a": 12, "b": 34}}</tool_call>'))
    assert (turn.role, turn.name, turn.arguments, turn.content, turn.error) == ("tool", "multiply", {"a": 12, "b": 34}, "408", None)
    assert turn.seconds is not None and turn.seconds >= 0


def test_an_async_tool_and_a_structured_result():
    async def fetch(key: str) -> dict:
        """Fetch a key.

        Args:
            key: The key.
        """
        await asyncio.sleep(0)
        return {"key": key, "n": 1}

    turn = run_call(_tools(fetch=fetch), _call('<tool_call>{"name": "fetch", "arguments": {"key": "k"}}</tool_call>'))
    assert turn.content == '{"key": "k", "n": 1}' and turn.error is None


def sleepy(s: float) -> str:
    """Sleep.

    Args:
        s: The s.
    """
    time.sleep(s)
    return "late"


def boom(x: int) -> int:
    """Fail.

    Args:
        x: The x.
    """
    raise ValueError(f"no {x}")


@pytest.mark.parametrize(
    "text, error",
    [
        ('<tool_call>{"name": "multiply", "arguments": {"a": 1,}}</tool_call>', "invalid tool call JSON: "),
        ('<tool_call>[1, 2]</tool_call>', "invalid tool call JSON: expected a JSON object, got list"),
        ('<tool_call>{"arguments": {"a": 1}}</tool_call>', 'the tool call has no "name"'),
        ('<tool_call>{"name": "divide", "arguments": {}}</tool_call>', "unknown tool 'divide' (available: boom, multiply, sleepy)"),
        ('<tool_call>{"name": "multiply", "arguments": {"a": 1}}</tool_call>', "wrong arguments for multiply: missing a required argument: 'b'"),
        ('<tool_call>{"name": "multiply", "arguments": {"a": 1, "b": 2, "c": 3}}</tool_call>', "wrong arguments for multiply: got an unexpected keyword argument 'c'"),
        ('<tool_call>{"name": "multiply", "arguments": [1, 2]}</tool_call>', "wrong arguments for multiply: expected a JSON object, got list"),
        ('<tool_call>{"name": "boom", "arguments": {"x": 3}}</tool_call>', "boom raised ValueError: no 3"),
        ('<tool_call>{"name": "sleepy", "arguments": {"s": 5}}</tool_call>', "sleepy timed out after 0.5s"),
    ],
)
def test_every_bad_call_becomes_an_error_text_the_model_reads(text, error):
    started = time.perf_counter()
    turn = run_call(_tools(multiply=multiply, boom=boom, sleepy=sleepy), _call(text))
    assert turn.error is not None and turn.error.startswith(error)
    assert turn.content == f"Error: {turn.error}"
    assert time.perf_counter() - started < 3  # a hung tool is abandoned at its timeout


def test_a_huge_result_is_cut_with_a_note_and_prints_go_to_stderr(capfd):
    def chatty(n: int) -> str:
        """Print.

        Args:
            n: The n.
        """
        print("a tool printing to stdout")
        return "x" * n

    turn = run_call(_tools(chatty=chatty), _call('<tool_call>{"name": "chatty", "arguments": {"n": 100000}}</tool_call>'))
    assert turn.content.startswith("x" * MAX_RESULT_CHARS)
    assert turn.content.endswith(f"[result cut: {MAX_RESULT_CHARS} of 100000 characters shown]")
    out, err = capfd.readouterr()
    assert "a tool printing to stdout" not in out and "a tool printing to stdout" in err


def test_a_call_still_running_when_an_earlier_one_ends_still_prints_to_stderr(capfd):
    # agent rollouts run several rows' calls at once: the first call to end must not hand the
    # real stdout back while another call still runs
    quick_inside, late_started, quick_done = threading.Event(), threading.Event(), threading.Event()

    def quick(x: int) -> int:
        """Return at once.

        Args:
            x: The x.
        """
        quick_inside.set()
        late_started.wait(timeout=5)
        return x

    def late(x: int) -> int:
        """Print late.

        Args:
            x: The x.
        """
        late_started.set()
        quick_done.wait(timeout=5)
        print("a late tool printing")
        return x

    tools = _tools(quick=quick, late=late)
    before = sys.stdout
    first = threading.Thread(target=run_call, args=(tools, _call('<tool_call>{"name": "quick", "arguments": {"x": 1}}</tool_call>')))
    second = threading.Thread(target=run_call, args=(tools, _call('<tool_call>{"name": "late", "arguments": {"x": 2}}</tool_call>')))
    first.start()
    assert quick_inside.wait(timeout=5)
    second.start()
    first.join(timeout=5)
    quick_done.set()
    second.join(timeout=5)
    out, err = capfd.readouterr()
    assert "a late tool printing" not in out and "a late tool printing" in err
    assert sys.stdout is before


def test_sys_exit_in_a_tool_is_an_error_not_an_exit():
    def quits(code: int) -> int:
        """Exit.

        Args:
            code: The code.
        """
        raise SystemExit(code)

    turn = run_call(_tools(quits=quits), _call('<tool_call>{"name": "quits", "arguments": {"code": 3}}</tool_call>'))
    assert turn.error == "quits raised SystemExit: 3"


def test_a_chat_template_that_cannot_render_a_tool_message_stops_the_start():
    from grpo_tui.worker.engine.policy.agent import check_template

    class Alternating:  # like templates that raise "Conversation roles must alternate user/assistant"
        chat_template = "..."

        def apply_chat_template(self, messages, **kwargs):
            raise ValueError("Conversation roles must alternate user/assistant/user/assistant/...")

    with pytest.raises(ToolError, match="cannot render a tool result message .ValueError: Conversation roles"):
        check_template(Alternating(), False)
