"""Parse one completion: the thinking block, the answer text and ``<tool_call>`` blocks.

Pure string functions, no MLX, so rewards and the store can share them.
"""

from __future__ import annotations

import json
import re

from grpo_tui.protocol.messages import ToolCall

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
_TOOL_CALL = re.compile(r"<tool_call>(.*?)(?:</tool_call>|\Z)", re.DOTALL)
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_NUMBER = re.compile(r"[-+]?(?:\d[\d,]*\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")


def split_thinking(text: str) -> tuple[str | None, str]:
    """``(thinking, answer)``. Thinking is the text before ``</think>`` (without an optional leading
    ``<think>``); ``None`` when the completion has no ``</think>``. A ``<think>`` that is never closed
    (the model ran out of tokens while thinking) makes the whole rest thinking and the answer empty."""
    if THINK_CLOSE in text:
        head, _, answer = text.partition(THINK_CLOSE)
        start = head.find(THINK_OPEN)
        thinking = head[start + len(THINK_OPEN) :] if start >= 0 else head
        return thinking.strip(), answer.strip()
    start = text.find(THINK_OPEN)
    if start >= 0:
        return text[start + len(THINK_OPEN) :].strip(), text[:start].strip()
    return None, text.strip()


def parse_tool_calls(text: str) -> list[ToolCall]:
    """Every ``<tool_call>{"name": ..., "arguments": ...}</tool_call>`` block, in order.

    status ``ok``: valid JSON object with a non-empty string ``name``; ``invalid_json``: the body
    does not parse as a JSON object (or the block is never closed); ``missing_name``: valid JSON
    without a usable ``name``. ``arguments`` may be an object or a JSON string holding one.
    """
    calls = []
    for index, match in enumerate(_TOOL_CALL.finditer(text)):
        raw, body = match.group(0), match.group(1).strip()
        if not raw.endswith("</tool_call>"):
            calls.append(ToolCall(index=index, status="invalid_json", error="unterminated <tool_call>", raw=raw))
            continue
        try:
            payload = json.loads(body)
        except json.JSONDecodeError as exc:
            calls.append(ToolCall(index=index, status="invalid_json", error=str(exc), raw=raw))
            continue
        if not isinstance(payload, dict):
            error = f"expected a JSON object, got {type(payload).__name__}"
            calls.append(ToolCall(index=index, status="invalid_json", error=error, raw=raw))
            continue
        arguments = payload.get("arguments", payload.get("parameters"))
        if isinstance(arguments, str):  # some models emit the arguments as a JSON string
            try:
                arguments = json.loads(arguments)
            except json.JSONDecodeError:
                pass
        name = payload.get("name")
        if not isinstance(name, str) or not name.strip():
            calls.append(
                ToolCall(index=index, arguments=arguments, status="missing_name", error="no \"name\" string", raw=raw)
            )
            continue
        calls.append(ToolCall(index=index, name=name, arguments=arguments, raw=raw))
    return calls


def extract_answer(text: str) -> str | None:
    """The final answer of an answer text: the last ``<answer>`` tag's content, else the last number,
    else ``None``."""
    tags = _ANSWER.findall(text)
    if tags:
        return tags[-1].strip()
    numbers = _NUMBER.findall(text)
    return numbers[-1] if numbers else None


def parse_number(text: object) -> float | None:
    """``text`` as a number (``"1,234"``, ``" 3.50 "``, ``7``), else ``None``."""
    if isinstance(text, bool):
        return None
    if isinstance(text, (int, float)):
        return float(text)
    if not isinstance(text, str):
        return None
    cleaned = text.strip().replace(",", "").rstrip(".")
    if not _NUMBER.fullmatch(cleaned):
        return None
    try:
        return float(cleaned)
    except ValueError:
        return None
