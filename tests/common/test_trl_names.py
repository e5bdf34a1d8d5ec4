"""A step frame under TRL 1.16's names: reward_std is the whole batch's, num_tokens the run's total
so far (across a resume), as TRL's GRPOTrainer logs them."""

from __future__ import annotations

import statistics

import pytest

from grpo_tui.common.trl_names import StepWindow, step_metrics
from grpo_tui.protocol.messages import Step


def test_reward_std_is_the_batch_std_of_the_scored_completions_not_the_groups_mean():
    # two groups of two: each group's std is 0, the batch's is not; None (unscored) is left out
    step = Step(step=1, epoch=0, reward_std=0.0, completion_rewards=[1.0, 1.0, 3.0, 3.0, None])
    assert step_metrics(step)["reward_std"] == pytest.approx(statistics.stdev([1.0, 1.0, 3.0, 3.0]))
    assert "reward_std" not in step_metrics(Step(step=1, epoch=0, completion_rewards=[1.0, None]))


def test_num_tokens_is_the_runs_total_so_far_and_a_resume_drops_the_abandoned_steps():
    window = StepWindow(2)
    logged = [window.add(Step(step=s, epoch=0, num_tokens=10 * s)) for s in (1, 2, 3, 4)]
    assert [e and e["num_tokens"] for e in logged] == [None, 30.0, None, 100.0]
    window.resume(3)  # the run went on from checkpoint-3: step 4 is done again
    assert window.add(Step(step=4, epoch=0, num_tokens=7))["num_tokens"] == 10 + 20 + 30 + 7
    fresh = StepWindow(1)  # a new process: the store's total of the resumed steps
    fresh.resume(3, total_tokens=60)
    assert fresh.add(Step(step=4, epoch=0, num_tokens=7))["num_tokens"] == 67
