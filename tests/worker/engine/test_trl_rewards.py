"""Reward functions written for TRL's GRPOTrainer run unchanged: the same arguments (prompts,
completions as strings or message lists, completion_ids, trainer_state, every column), plus
optional extras for functions that ask, and log_metric values in the step metrics and the store."""

from __future__ import annotations

import json
import pytest

from grpo_tui.protocol.config import load_config
from grpo_tui.worker.engine.trainer import MlxTrainer
from tests.conftest import EXAMPLES
from tests.helpers.tiny_model import write_config


# TRL's own reward (trl/rewards/format_rewards.py), copied unchanged.
TRL_REWARDS = '''
import json
import re


def think_format_reward(completions: list[list[dict[str, str]]], **kwargs) -> list[float]:
    pattern = r"^<think>(?!.*<think>)(.*?)</think>.*$"
    completion_contents = [completion[0]["content"] for completion in completions]
    matches = [re.match(pattern, content, re.DOTALL | re.MULTILINE) for content in completion_contents]
    return [1.0 if match else 0.0 for match in matches]


# TRL's documentation example for standard data
def reward_len(completions, **kwargs):
    return [-abs(20 - len(completion)) for completion in completions]


# TRL's documented signature with a dataset column by name
def reward_answer(prompts, completions, answer, **kwargs):
    texts = [c[0]["content"] if isinstance(c, list) else c for c in completions]
    return [1.0 if a in t else 0.0 for t, a in zip(texts, answer)]


def record(prompts, completions, completion_ids, trainer_state, **kwargs):
    with open(kwargs["log_path"][0], "a") as f:
        f.write(json.dumps({
            "prompt": prompts[0], "completion": completions[0], "ids": completion_ids[0],
            "global_step": trainer_state.global_step, "epoch": trainer_state.epoch,
            "kwargs": sorted(kwargs), "finish_reason": kwargs["finish_reason"][0],
            "num_tokens": kwargs["num_tokens"][0], "tool_calls": kwargs["tool_calls"][0],
        }) + "\\n")
    kwargs["log_metric"]("mean_ids", sum(map(len, completion_ids)) / len(completion_ids))
    return [0.0] * len(completions)


def strict(prompts, completions, answer, log_path, level):  # no **kwargs: the columns, none of the new arguments
    return [0.5] * len(completions)
'''
STEP = """
[grpo]
group_size = 2
[generation]
max_completion_length = 8
[training]
batch_size = 2
"""


def _data(path, conversational: bool, log_path) -> None:
    rows = []
    for q, a in (("What is 2+3?", "5"), ("What is 4+4?", "8")):
        prompt = [{"role": "user", "content": q}] if conversational else q
        rows.append({"prompt": prompt, "answer": a, "log_path": str(log_path), "level": 3})
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")


def _trainer(tmp_path, conversational: bool, rewards: list[str]):
    (tmp_path / "trl_rewards.py").write_text(TRL_REWARDS)
    log_path = tmp_path / "calls.jsonl"
    config = STEP + "".join(f'\n[[rewards]]\nfunction = "trl_rewards.py:{r}"\n' for r in rewards)
    path = write_config(tmp_path, EXAMPLES / "models" / "tiny-arith", config)
    _data(tmp_path / "data.jsonl", conversational, log_path)
    # only the functions under test
    path.write_text(path.read_text().replace('name = "accuracy"', 'function = "trl_rewards.py:strict"')
                    .replace('name = "length"', 'function = "trl_rewards.py:strict"'))
    return MlxTrainer(load_config(path), log=lambda level, message: None), log_path


def test_trl_functions_run_unchanged_on_conversational_data(tmp_path):
    trainer, log_path = _trainer(tmp_path, True, ["think_format_reward", "reward_answer", "record", "strict"])
    out = trainer.train_step(1)
    assert {"think_format_reward", "reward_answer", "record", "strict"} <= set(out.metrics.rewards)
    assert out.metrics.rewards["think_format_reward"] == 0.0  # the demo model never thinks
    call = json.loads(log_path.read_text().splitlines()[0])
    assert call["prompt"] == [{"role": "user", "content": call["prompt"][0]["content"]}]
    assert call["completion"][0]["role"] == "assistant" and isinstance(call["completion"][0]["content"], str)
    assert all(isinstance(t, int) for t in call["ids"]) and len(call["ids"]) == call["num_tokens"]
    assert call["global_step"] == 0 and call["epoch"] == 0.0  # nothing trained yet when step 1 scores
    assert {"answer", "level", "finish_reason", "thinking", "tool_calls", "num_tokens", "log_metric"} <= set(call["kwargs"])
    assert call["finish_reason"] in ("stop", "length", "repetition") and call["tool_calls"] == []
    assert out.metrics.extra_metrics["mean_ids"] == pytest.approx(
        sum(g.num_tokens for g in out.generations) / len(out.generations), rel=0.3)


def test_trl_functions_run_unchanged_on_standard_data(tmp_path):
    trainer, log_path = _trainer(tmp_path, False, ["reward_len", "record"])
    trainer.train_step(1)
    out = trainer.train_step(2)
    call = json.loads(log_path.read_text().splitlines()[-1])
    assert isinstance(call["completion"], str) and isinstance(call["prompt"], str)
    assert call["global_step"] == 1 and call["epoch"] == pytest.approx(1.0)  # 2 prompts: one step an epoch
    lengths = [len(g.raw_completion) for g in out.generations]
    assert out.metrics.rewards["reward_len"] == pytest.approx(sum(-abs(20 - n) for n in lengths) / len(lengths))
