"""The json_schema reward on the reference validator: every keyword counts (pattern, minimum, anyOf,
$ref, format…), the schema's own draft is honoured, the validator's messages reach the generation's
notes, and an invalid schema is a config error naming the key."""

from __future__ import annotations

import json

import pytest

from grpo_tui.protocol.config import ConfigError, RewardConfig
from grpo_tui.worker.engine.scoring.reward_call import StepLog
from grpo_tui.worker.engine.scoring.rewards import json_schema, load_rewards

SCHEMA = {
    "$defs": {"code": {"type": "string", "pattern": "^[A-Z]{3}$"}},
    "type": "object",
    "properties": {
        "from": {"$ref": "#/$defs/code"},
        "to": {"$ref": "#/$defs/code"},
        "passengers": {"type": "integer", "minimum": 1},
        "when": {"anyOf": [{"type": "string", "format": "date"}, {"type": "null"}]},
    },
    "required": ["from", "to", "passengers"],
}


def _score(answers, schema=SCHEMA):
    log = StepLog(len(answers))
    scores = json_schema([""] * len(answers), [json.dumps(a) if not isinstance(a, str) else a for a in answers],
                         schema=schema, log_extra=log.extra_logger("json_schema"))
    return scores, [log.notes(i) for i in range(len(answers))]


def test_keywords_the_old_subset_ignored_now_fail_the_match():
    good = {"from": "LHR", "to": "JFK", "passengers": 2, "when": "2026-12-01"}
    scores, notes = _score([
        good,
        {**good, "from": "london"},  # pattern, through $ref
        {**good, "passengers": 0},  # minimum
        {**good, "when": 5},  # anyOf
        "no json here",
    ])
    assert scores == [1.0, 0.5, 0.5, 0.5, 0.0]
    assert notes[0] == {} and notes[4] == {"json_schema": "no JSON found"}
    assert notes[1]["json_schema"] == "$.from: 'london' does not match '^[A-Z]{3}$'"
    assert notes[2]["json_schema"] == "$.passengers: 0 is less than the minimum of 1"
    assert "$.when: 5 is not valid under any of the given schemas" in notes[3]["json_schema"]


def test_the_schema_draft_is_the_one_it_names():
    # Draft 4's exclusiveMaximum is a boolean modifier; 2020-12 would reject this schema
    draft4 = {"$schema": "http://json-schema.org/draft-04/schema#", "type": "number", "maximum": 5,
              "exclusiveMaximum": True}
    rewards = load_rewards([RewardConfig(name="json_schema", params={"schema": draft4})])
    fn = rewards[0]
    assert fn.fn([""] * 2, ["5", "4"], **fn.params) == [0.5, 1.0]


def test_an_invalid_schema_is_a_config_error_naming_the_key():
    with pytest.raises(ConfigError) as caught:
        load_rewards([RewardConfig(name="accuracy"),
                      RewardConfig(name="json_schema", params={"schema": {"type": "objekt"}})])
    assert caught.value.key == "rewards[1].params.schema"
    assert "'objekt' is not valid" in str(caught.value)
