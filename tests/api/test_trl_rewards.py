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
