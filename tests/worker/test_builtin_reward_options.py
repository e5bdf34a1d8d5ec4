"""The built-in rewards' options as mlx-node users know them, through the real worker: ``length``'s
band in tokens and in characters, ``tool_use``'s ``allowed_tools``, a reward timeout of 0."""

from __future__ import annotations

import json

import pytest

from grpo_tui.protocol import messages as m
from grpo_tui.protocol.config import parse_config
from tests.helpers.worker_harness import WorkerProcess, query, tiny_model, write_config

__all__ = ["tiny_model"]


def band(n: int, low: int, high: int) -> float:
    """mlx-node's Length reward: full inside the band, linear below, half off at twice the top."""
    if n < low:
        return n / low
    if n > high:
        return 1.0 - 0.5 * min(1.0, (n - high) / high)
    return 1.0


def stored(folder) -> list[tuple]:
    return query(folder / "out" / "outputs.db", "SELECT completion, num_tokens, reward_details FROM generations")


@pytest.mark.parametrize("unit", ["tokens", "chars"])
def test_the_length_band_scores_each_stored_completion_by_its_length(tmp_path, tiny_model, unit):
    rewards = f'[[rewards]]\nname = "length"\ntimeout_s = 0\nparams = {{ min_length = 4, max_length = 6, unit = "{unit}" }}\n'
    config = write_config(tmp_path, tiny_model, rewards=rewards, training={"max_steps": 2, "silent_patience": 0})
    worker = WorkerProcess(config)
    worker.wait_for(m.Complete)
    assert worker.finish() == 0, worker.stderr.decode()[-2000:]
    rows = stored(tmp_path)
    assert len(rows) == 8  # 2 steps × 2 prompts × 2 completions
    lengths = set()
    for completion, num_tokens, details in rows:
        n = num_tokens if unit == "tokens" else len(completion)
        lengths.add(n)
        assert json.loads(details)["length"] == pytest.approx(band(n, 4, 6)), (completion, num_tokens)
    assert len(lengths) > 1 or unit == "tokens"  # characters vary on a random model; tokens hit the 8-token cap


def test_tool_use_takes_its_allowed_tools_and_required_from_the_config(tmp_path):
    (tmp_path / "model").mkdir()
    (tmp_path / "data.jsonl").write_text('{"prompt": "1+1", "answer": "2"}\n')
    text = '[model]\npath = "model"\n[data]\npath = "data.jsonl"\n[[rewards]]\nname = "tool_use"\ntimeout_s = 0\n' \
           'params = { allowed_tools = ["multiply"], required = true }\n'
    [reward] = parse_config(text, base_dir=tmp_path).rewards
    assert reward.params == {"allowed_tools": ["multiply"], "required": True} and reward.timeout_s == 0
