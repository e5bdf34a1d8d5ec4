"""Built-in rewards (their docstring formulas) and custom reward functions (loading, errors)."""

import time

import pytest

from grpo_tui.protocol.config import RewardConfig
from grpo_tui.worker.engine.scoring import rewards as R
from grpo_tui.worker.engine.scoring.rewards import RewardError, RewardFailed, load_rewards, score


def test_accuracy_compares_the_final_answer_numerically_or_as_text():
    completions = [
        "<think>3+4 is 8? no</think><answer>7.0</answer>",  # tag wins, thinking ignored
        "it is 1,000",  # last number, separators
        "<answer>Paris</answer>",
        "7 or 8",
        "no idea",
        "anything",
    ]
    answers = ["7", "1000", " paris", "7", "7", None]
    assert R.accuracy([""] * 6, completions, answer=answers) == [1.0, 1.0, 1.0, 0.0, 0.0, None]


def test_xml_format_rewards_one_answer_block_with_nothing_after():
    scores = R.xml_format([], ["<answer>7</answer>", "<answer>7</answer> extra", "7", "<answer>1</answer><answer>2</answer>"])
    assert scores == [1.0, 0.5, 0.0, 0.0]
    both = R.xml_format([], ["<think>hm</think><answer>7</answer>", "<answer>7</answer>"], tags=["think", "answer"])
    assert both == [1.0, 0.5]


def test_length_prefers_short_or_the_target():
    assert R.length([], ["a", "b"], num_tokens=[0, 50], max_completion_length=100) == [1.0, 0.5]
    assert R.length([], ["a", "b", "c"], num_tokens=[10, 15, 40], max_completion_length=100, target=10) == [1.0, 0.5, 0.0]


def test_length_band_is_full_inside_linear_below_and_halved_at_twice_the_top():
    tokens = R.length([], [""] * 5, num_tokens=[2, 4, 8, 12, 40], max_completion_length=100, min_length=4, max_length=8)
    assert tokens == [0.5, 1.0, 1.0, 0.75, 0.5]
    chars = R.length([], ["ab", "abcdef"], num_tokens=[9, 9], max_completion_length=100, min_length=4, unit="chars")
    assert chars == [0.5, 1.0]


def test_tool_use_is_the_share_of_good_calls():
    ok = '<tool_call>{"name": "add", "arguments": {}}</tool_call>'
    bad = "<tool_call>{oops</tool_call>"
    other = '<tool_call>{"name": "rm", "arguments": {}}</tool_call>'
    assert R.tool_use([], [ok + bad, ok, "none"]) == [0.5, 1.0, None]
    assert R.tool_use([], ["none", ok + other], tools=["add"], required=True) == [0.0, 0.5]
    assert R.tool_use([], [ok + other], tools=[None], allowed_tools=["rm"]) == [0.5]  # the config's list wins


def test_json_schema_scores_valid_parsed_and_missing_json():
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"], "additionalProperties": False}
    completions = ['{"n": 3}', 'Here: {"n": "3"}', '{"n": 3, "x": 1}', "no json", '<j>{"n": 1}</j>']
    assert R.json_schema([], completions, schema=schema) == [1.0, 0.5, 0.5, 0.0, 1.0]
    assert R.json_schema([], ['{"n": 1}', '<j>{"n": 1}</j>'], schema=schema, tag="j") == [0.0, 1.0]


def _write(tmp_path, body):
    path = tmp_path / "my_rewards.py"
    path.write_text(body)
    return str(path)


CUSTOM = '''
import asyncio, math, time

def brevity(prompts, completions, **kw):
    return [1.0 / (1 + len(c)) for c in completions]

def uses_columns(prompts, completions, level, **kw):
    return [None if l == 0 else float(l) for l in level]

async def slow_async(prompts, completions, **kw):
    await asyncio.sleep(0.01)
    return [2.0] * len(completions)

def hang(prompts, completions, **kw):
    time.sleep(60)

def boom(prompts, completions, **kw):
    raise KeyError("nope")

def short(prompts, completions, **kw):
    return [1.0]

def text(prompts, completions, **kw):
    return ["good"] * len(completions)

def nan(prompts, completions, **kw):
    return [math.nan] * len(completions)
'''


def _rewards(tmp_path, *specs, **overrides):
    path = _write(tmp_path, CUSTOM)
    return load_rewards([RewardConfig(function=f"{path}:{s}", **overrides) for s in specs])


def _score(rs, warn=lambda m: None):
    return score(rs, ["p", "q"], ["ab", "abcd"], {"level": [0, 2]}, {}, warn)


def test_custom_functions_get_columns_and_may_be_async(tmp_path):
    rs = _rewards(tmp_path, "brevity", "uses_columns", "slow_async")
    rs[1].weight = 0.5
    totals, per_fn = _score(rs)
    assert per_fn == {"brevity": [1 / 3, 1 / 5], "uses_columns": [None, 2.0], "slow_async": [2.0, 2.0]}
    assert totals == pytest.approx([1 / 3 + 2.0, 1 / 5 + 0.5 * 2.0 + 2.0])  # None is left out


def test_module_function_and_duplicate_labels(tmp_path):
    rs = load_rewards([RewardConfig(function="grpo_tui.worker.engine.scoring.rewards:accuracy"), RewardConfig(name="accuracy")])
    assert [r.label for r in rs] == ["accuracy", "accuracy#2"]


@pytest.mark.parametrize(
    "func, words",
    [
        ("boom", "KeyError"),
        ("short", "returned 1 scores for 2"),
        ("text", "return numbers (or None), not str"),
        ("hang", "did not return within timeout_s = 0.3 s"),
    ],
)
def test_a_failing_function_stops_with_an_error_naming_it(tmp_path, func, words):
    rs = _rewards(tmp_path, func, timeout_s=0.3)
    start = time.monotonic()
    with pytest.raises((RewardError, RewardFailed), match=func) as info:
        _score(rs)
    assert words in str(info.value)
    assert time.monotonic() - start < 5  # a hung function does not hang the run


def test_on_error_skip_scores_none_and_warns(tmp_path):
    rs = _rewards(tmp_path, "boom", on_error="skip") + _rewards(tmp_path, "brevity")
    warnings = []
    totals, per_fn = _score(rs, warnings.append)
    assert per_fn["boom"] == [None, None]
    assert totals == pytest.approx([1 / 3, 1 / 5])
    assert len(warnings) == 1 and "boom" in warnings[0]


def test_a_missing_function_is_a_clear_error(tmp_path):
    path = _write(tmp_path, CUSTOM)
    with pytest.raises(RewardError, match="'missing' is not a function"):
        load_rewards([RewardConfig(function=f"{path}:missing")])


def test_the_config_knows_each_builtin_rewards_parameters():
    """protocol.config.BUILTIN_REWARD_PARAMS (checked when the config is read, so that ``grpo-tui
    check`` names an unknown one) against the functions: every keyword a built-in takes that no
    TRL argument, column or extra fills."""
    import inspect

    from grpo_tui.protocol.config import BUILTIN_REWARD_PARAMS
    from grpo_tui.worker.engine.scoring.rewards import BUILTINS

    filled = {"prompts", "completions", "completion_ids", "answer", "metadata", "num_tokens", "tools", "log_extra", "_"}
    for name, fn in BUILTINS.items():
        params = [p for p in inspect.signature(fn).parameters if p not in filled]
        assert sorted(params) == sorted(BUILTIN_REWARD_PARAMS[name]), name
