"""Thinking / answer split, tool-call parsing, final-answer extraction."""

import pytest

from grpo_tui.worker.engine.policy.parsing import extract_answer, parse_number, parse_tool_calls, split_thinking


def test_thinking_is_split_from_the_answer():
    assert split_thinking("<think>\nadd them\n</think>\n\n<answer>7</answer>") == ("add them", "<answer>7</answer>")
    # Qwen3 templates put <think> in the prompt, so the completion may start inside the block.
    assert split_thinking("add them</think>7") == ("add them", "7")
    assert split_thinking("just 7") == (None, "just 7")


def test_unclosed_thinking_leaves_an_empty_answer():
    assert split_thinking("<think>still going") == ("still going", "")


def test_well_formed_tool_calls_are_ok():
    text = 'x <tool_call>{"name": "add", "arguments": {"a": 1}}</tool_call> y <tool_call>{"name": "f", "arguments": "{\\"b\\": 2}"}</tool_call>'
    calls = parse_tool_calls(text)
    assert [(c.index, c.status, c.name, c.arguments) for c in calls] == [(0, "ok", "add", {"a": 1}), (1, "ok", "f", {"b": 2})]
    assert calls[0].raw.startswith("<tool_call>") and calls[0].raw.endswith("</tool_call>")


@pytest.mark.parametrize(
    "body, status, error_part",
    [
        ('{"name": "add", "arguments": {', "invalid_json", "Expecting"),
        ("[1, 2]", "invalid_json", "JSON object"),
        ('{"arguments": {"a": 1}}', "missing_name", "name"),
        ('{"name": "", "arguments": {}}', "missing_name", "name"),
    ],
)
def test_bad_tool_calls_get_a_status_and_the_error(body, status, error_part):
    (call,) = parse_tool_calls(f"<tool_call>{body}</tool_call>")
    assert call.status == status
    assert error_part in call.error


def test_unterminated_tool_call_is_invalid():
    (call,) = parse_tool_calls('<tool_call>{"name": "add"}')
    assert call.status == "invalid_json" and "unterminated" in call.error


def test_final_answer_prefers_the_answer_tag_then_the_last_number():
    assert extract_answer("3 + 4 = <answer> 7 </answer> (not 8)") == "7"
    assert extract_answer("first 3, then -12.5 apples") == "-12.5"
    assert extract_answer("no digits") is None


def test_numbers_parse_with_separators_and_reject_text():
    assert parse_number(" 1,234.50 ") == 1234.5
    assert parse_number(7) == 7.0
    assert parse_number("7.") == 7.0
    assert parse_number("seven") is None
    assert parse_number(None) is None
