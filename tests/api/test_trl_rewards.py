"""Reward functions as TRL calls them, through the real worker: synchronous ones on the main thread
(signal-based timeouts work: open-r1's len_reward, verbatim), a numpy array with a NaN as scores
(NaN: not applicable), and ``grpo_tui.rewards``' TRL names."""

from __future__ import annotations

import pytest

from grpo_tui import GRPOTrainer
from tests.helpers.api_runs import TINY_MODEL, chat_rows, quick_args


def on_main_thread(completions, **kwargs):
    import signal
    import threading

    signal.signal(signal.SIGALRM, signal.getsignal(signal.SIGALRM))  # raises off the main thread
    import asyncio

    asyncio.run(asyncio.sleep(0))  # a reward's own event loop, as on TRL's main thread
    return [float(threading.current_thread() is threading.main_thread())] * len(completions)


def numpy_with_nan(completions, **kwargs):
    import numpy as np

    scores = np.arange(len(completions), dtype=np.float32)
    scores[0] = np.nan  # "no score" for the first completion of each call
    return scores


def test_synchronous_rewards_run_on_the_main_thread_and_numpy_nan_scores_count(tmp_path):
    trainer = GRPOTrainer(model=str(TINY_MODEL), reward_funcs=[on_main_thread, numpy_with_nan],
                          args=quick_args(tmp_path, max_steps=2), train_dataset=chat_rows())
    trainer.train()
    entries = [e for e in trainer.state.log_history if "reward" in e]
    assert [e["step"] for e in entries] == [1, 2]
    for entry in entries:
        assert entry["rewards/on_main_thread/mean"] == 1.0
        assert entry["rewards/numpy_with_nan/mean"] == pytest.approx(2.0)  # (1 + 2 + 3) / 3: the NaN left out


def test_open_r1_len_reward_verbatim(tmp_path):
    pytest.importorskip("math_verify")
    from tests.helpers.open_r1_rewards import len_reward

    trainer = GRPOTrainer(model=str(TINY_MODEL), reward_funcs=len_reward,
                          args=quick_args(tmp_path, max_steps=2, temperature=1.5), train_dataset=chat_rows())
    trainer.train()
    entries = [e for e in trainer.state.log_history if "reward" in e]
    assert [e["step"] for e in entries] == [1, 2] and all("rewards/len_reward/mean" in e for e in entries)


def test_grpo_tui_rewards_give_trl_s_documented_results(monkeypatch):
    """The examples of TRL's docstrings (trl/rewards), and the math_verify-free fallback."""
    import grpo_tui.rewards as rewards

    boxed = [[{"role": "assistant", "content": r"My answer is \boxed{\frac{1}{3}}"}],
             [{"role": "assistant", "content": r"My answer is \boxed{\frac{1}{2}}"}]]
    if "math_verify" in __import__("sys").modules or rewards._has_math_verify():
        assert rewards.accuracy_reward(boxed, [r"\frac{1}{3}", r"\frac{1}{3}"]) == [1.0, 0.0]
    assert rewards.think_format_reward([[{"content": "<think>\nThis is my reasoning.\n</think>\nThis is my answer."}],
                                        [{"content": "<think>\nThis is my reasoning.\nThis is my answer."}]]) == [1.0, 0.0]
    assert rewards.get_soft_overlong_punishment(max_completion_len=100, soft_punish_cache=20)([[1] * 90]) == [-0.5]
    assert rewards.get_repetition_penalty_reward(ngram_size=2)([[1, 2, 3, 4], [5, 5, 5, 5, 5]]) == [0.0, -0.75]
    cosine = rewards.get_cosine_scaled_reward(max_len=100)
    assert cosine(boxed, [r"\frac{1}{3}"] * 2, [[1] * 50] * 2) == pytest.approx([0.75, -0.75])
    monkeypatch.setattr(rewards, "_has_math_verify", lambda: False)
    if rewards.accuracy_reward is rewards._own_accuracy_reward:  # ours (TRL not installed): without math_verify too
        assert rewards.accuracy_reward(boxed, [r"\frac{1}{3}", r"\frac{1}{3}"]) == [1.0, 0.0]
        assert rewards.accuracy_reward(["so 4", "5"], ["4", "4"]) == [1.0, 0.0]
        assert rewards.accuracy_reward.__name__ == "accuracy_reward"


def test_a_reward_called_where_a_loop_runs_on_the_main_thread_may_run_its_own(tmp_path):
    """Engine in a notebook: the kernel's loop runs on the main thread, where the reward is called."""
    import asyncio

    from grpo_tui.worker.engine.scoring import timed_calls

    def reward(**kwargs):
        return asyncio.run(asyncio.sleep(0, result=[1.0]))

    async def notebook_cell():
        return timed_calls.call(reward, {}, 5.0, "reward", main_thread=True)

    assert asyncio.run(notebook_cell()) == [1.0]


def test_the_built_in_rewards_are_importable_and_score_when_called_directly():
    """mlx-node's users call the built-ins themselves: tool use with an allowed list, XML format, a
    length band, a JSON schema."""
    import subprocess
    import sys

    from grpo_tui.rewards import json_schema, length, tool_use, xml_format

    assert xml_format([""] * 2, ["<answer>4</answer>", "4"]) == [1.0, 0.0]
    assert length([""] * 3, ["a", "b", "c"], num_tokens=[2, 10, 40], max_completion_length=64, min_length=4,
                  max_length=20) == [0.5, 1.0, 0.5]
    schema = {"type": "object", "required": ["city"], "properties": {"city": {"type": "string"}}}
    assert json_schema([""] * 3, ['{"city": "Oslo"}', '{"town": 1}', "no json"], schema=schema) == [1.0, 0.5, 0.0]
    call = '<tool_call>\n{"name": "%s", "arguments": {"q": "x"}}\n</tool_call>'
    assert tool_use([""] * 3, [call % "search", call % "shell", "no call"], allowed_tools=["search"],
                    required=True) == [1.0, 0.0, 0.0]
    # importing the TRL names alone brings in none of the worker
    code = "import sys, grpo_tui.rewards; print('grpo_tui.worker.engine.scoring.rewards' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip() == "False"
