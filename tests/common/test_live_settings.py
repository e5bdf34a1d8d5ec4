"""The one check of a live change (common/live_settings.py): ``--set``'s sentence for a bad value,
the list of what can change for a key that cannot."""

from __future__ import annotations

import pytest

from grpo_tui.protocol.config import ConfigError, parse_config
from grpo_tui.common.live_settings import canonical_key, check, live_keys, toml_value

TOML = """
[model]
path = "m"
[data]
path = "d.jsonl"
[[rewards]]
name = "length"
[[rewards]]
name = "accuracy"
"""


def config(text: str = TOML):  # type: ignore[no-untyped-def]
    return parse_config(text, check_paths=False)


def test_a_live_key_comes_back_with_its_value_read_as_set_reads_it():
    assert check(config(), "training.learning_rate=5e-6", "c.toml") == ("training.learning_rate", 5e-6)
    assert check(config(), "rewards.1.weight=0.5", "c.toml") == ("rewards[1].weight", 0.5)
    assert check(config(), "grpo.scale_rewards=batch", "c.toml") == ("grpo.scale_rewards", "batch")
    assert canonical_key(" rewards.0.weight") == "rewards[0].weight"


@pytest.mark.parametrize("item", ["grpo.beta=-1", "generation.top_p=2", "training.learning_rat=1", "grpo.scale_rewards=x"])
def test_a_bad_value_gets_the_sentence_of_set(item):
    with pytest.raises(ConfigError) as live:
        check(config(), item, "c.toml")
    with pytest.raises(ConfigError) as at_start:
        parse_config(TOML, check_paths=False, file="c.toml", overrides=[item])
    assert live.value.sentence == at_start.value.sentence


def test_a_key_that_cannot_change_lists_what_can_and_the_resume_with_it():
    with pytest.raises(ConfigError) as refused:
        check(config(), "model.lora.rank=16", "c.toml")
    sentence = refused.value.sentence
    assert sentence.startswith("c.toml: model.lora.rank: cannot change in a live run:")
    assert "These can: training.learning_rate" in sentence and "rewards[1].weight" in sentence
    assert "`grpo-tui run c.toml --set checkpoint.resume=latest --set model.lora.rank=16`" in sentence
    assert "eval.every" not in live_keys(config())  # no [eval] table
    assert "eval.every" in live_keys(config(TOML + "[eval]\nevery = 5\n"))


def test_values_come_back_as_toml():
    assert [toml_value(v) for v in (5e-06, True, "group", 7)] == ["5e-06", "true", '"group"', "7"]
