"""A judge model as a reward: a tiny judge built in the test whose verdict is known (``yes`` when its
input holds a digit) scores the completions by that verdict, as the probability of "yes" or as the
number it replies; loaded once, frozen, batched; its weights count in memory_limit_gb's estimate."""

from __future__ import annotations

import pytest
from mlx.utils import tree_flatten

from grpo_tui.protocol.config import ConfigError, parse_config
from grpo_tui.worker.engine.models import memory_fit
from grpo_tui.worker.engine.scoring.judge import Judge, take_seconds, weights_bytes
from grpo_tui.worker.engine.scoring.rewards import load_rewards, score
from tests.helpers.judge_model import build_digit_judge

COMPLETIONS = ["hello there", "the answer is 7", "no digits at all, none", "x" * 150 + "3", "", "<think>4</think>ok"]
VERDICT = [any(ch.isdigit() for ch in c) for c in COMPLETIONS]


@pytest.fixture(scope="module")
def judges(tmp_path_factory):
    root = tmp_path_factory.mktemp("judges")
    return build_digit_judge(root / "yes-no"), build_digit_judge(root / "nine-zero", yes="9", no="0")


def _config(model, judge: str, tmp_path=None):
    text = f"""
[model]
path = "m"
[data]
path = "d.jsonl"
[[rewards]]
judge = {{ model = "{model}", {judge} }}
weight = 2.0
"""
    return parse_config(text, check_paths=False)


def _score(rewards, prompts):
    totals, per_fn = score(rewards, prompts, COMPLETIONS, {}, {"num_tokens": [1] * len(COMPLETIONS)}, lambda m: None)
    return totals, per_fn["judge"]


@pytest.mark.parametrize("batch_size", [1, 4, 16])
def test_the_yes_probability_follows_the_judges_verdict(judges, batch_size):
    config = _config(judges[0], f'prompt = "Question: {{prompt}} Answer: {{completion}} Digit?", batch_size = {batch_size}')
    rewards = load_rewards(config.rewards)
    totals, scores = _score(rewards, ["Say something."] * len(COMPLETIONS))
    for s, verdict in zip(scores, VERDICT):
        assert s == pytest.approx(1.0 if verdict else 0.0, abs=1e-6)
    assert totals == pytest.approx([2.0 * s for s in scores])  # weighted like any reward


def test_a_prompt_with_a_digit_makes_every_verdict_yes(judges):
    """{prompt} reaches the judge too (here as the last user message of a conversation)."""
    config = _config(judges[0], 'prompt = "{prompt} {completion}"')
    rewards = load_rewards(config.rewards)
    _, scores = _score(rewards, [[{"role": "system", "content": "be brief"}, {"role": "user", "content": "2+2?"}]]
                       * len(COMPLETIONS))
    assert scores == pytest.approx([1.0] * len(COMPLETIONS))


def test_a_number_parsed_from_the_reply(judges):
    config = _config(judges[1], 'prompt = "Rate: {completion}", score = "number", max_tokens = 1, batch_size = 4')
    rewards = load_rewards(config.rewards)
    _, scores = _score(rewards, ["q"] * len(COMPLETIONS))
    assert scores == [9.0 if v else 0.0 for v in VERDICT]
    # a reply without a number is "not applicable", with the reply in the completion's notes
    config = _config(judges[0], 'prompt = "Rate: {completion}", score = "number", max_tokens = 1')
    rewards = load_rewards(config.rewards)
    _, scores = _score(rewards, ["q"] * len(COMPLETIONS))
    assert scores == [None] * len(COMPLETIONS)


def test_loaded_once_frozen_timed_and_counted_in_memory(judges):
    config = _config(judges[0], 'prompt = "{completion}"')
    rewards = load_rewards(config.rewards)
    judge = rewards[0].fn
    assert isinstance(judge, Judge) and rewards[0].inline
    assert tree_flatten(judge.model.trainable_parameters()) == []  # frozen: nothing to train
    _score(rewards, ["q"] * len(COMPLETIONS))
    _score(rewards, ["q"] * len(COMPLETIONS))
    assert rewards[0].fn is judge  # the same model object for every call
    seconds = take_seconds(rewards)
    assert seconds is not None and seconds > 0 and take_seconds(rewards) == 0.0
    assert weights_bytes(rewards) == judge.nbytes > 100_000
    shape = memory_fit.StepShape(parameters=10**6, trainable=10**6, bytes_per_value=4, vocabulary=1000, hidden=64,
                                 intermediate=128, heads=4, layers=2, rows=8, group=4, prompt_tokens=16,
                                 completion_tokens=16, reference=False)
    with_judge = memory_fit.StepShape(**{**shape.__dict__, "extra_bytes": 3 * 10**9})
    assert memory_fit.estimate(with_judge, False, 0, 0) - memory_fit.estimate(shape, False, 0, 0) == 3 * 10**9


@pytest.mark.parametrize("judge, message", [
    ('prompt = "no placeholder"', "must contain {completion}"),
    ('prompt = "{completion}", score = "vibes"', "score"),
    ('prompt = "{completion}", max_tokens = 0', "max_tokens: 0 must be at least 1"),
])
def test_bad_judge_tables_are_config_errors_naming_the_key(judge, message):
    with pytest.raises(ConfigError, match="rewards\\[0\\].judge") as error:
        _config("some/model", judge)
    assert message in str(error.value)


def test_a_missing_judge_model_folder_is_a_config_error(tmp_path):
    (tmp_path / "d.jsonl").write_text("")
    (tmp_path / "m").mkdir()
    text = f'[model]\npath="m"\n[data]\npath="d.jsonl"\n[[rewards]]\njudge = {{ model = "./judges/none", prompt = "{{completion}}" }}\n'
    with pytest.raises(ConfigError, match="rewards\\[0\\].judge.model: './judges/none' does not exist"):
        parse_config(text, base_dir=tmp_path)
