"""TRL 1.16's loss types train through the real worker (the math itself: tests/worker/engine/test_loss_types.py):
finite losses, the weights move, and each type's own metric reaches the step frame and the store."""

from __future__ import annotations

import json
import math

import pytest

from grpo_tui.protocol import messages as m
from tests.helpers.worker_harness import WorkerProcess, query, reward_config, tiny_model, write_config

__all__ = ["tiny_model"]


@pytest.mark.parametrize("loss_type, grpo, metric", [
    # with TRL's adaptive entropy bonus: the coefficient and the policy loss reach the frame too
    ("sapo", {"sapo_temperature_neg": 1.2, "entropy_coef": 0.01, "use_adaptive_entropy": True,
              "entropy_target": 100.0}, "entropy_coef"),
    ("vespo", {"num_iterations": 2}, "vespo/phi_seq_mean"),
    ("cispo", {"epsilon_high": 5.0, "beta": 0.02, "use_bias_correction_kl": True}, "cispo_clip_ratio"),
])
def test_a_run_trains_with_each_new_loss_type(tmp_path, tiny_model, loss_type, grpo, metric):
    config = write_config(tmp_path, tiny_model, rewards=reward_config(tmp_path, "varied"),
                          grpo={"group_size": 2, "loss_type": loss_type, **grpo},
                          training={"max_steps": 2, "gradient_accumulation_steps": 2, "silent_patience": 0},
                          checkpoint={"save_every": 0})
    worker = WorkerProcess(config)
    worker.wait_for(m.Complete)
    assert worker.finish() == 0
    steps = worker.of(m.Step)
    assert [s.step for s in steps] == [1, 2] and all(s.loss is not None and math.isfinite(s.loss) for s in steps)
    assert steps[0].grad_norm is not None and steps[0].grad_norm > 0
    if metric is not None:
        assert all(0 <= s.extra_metrics[metric] < 10 for s in steps)
        stored = [json.loads(e) for (e,) in query(tmp_path / "out" / "outputs.db", "SELECT extra_metrics FROM steps")]
        assert all(metric in e for e in stored)
    if loss_type == "sapo":  # below the target: up by entropy_coef_delta each step, applied from step 2
        assert [round(s.extra_metrics["entropy_coef"], 6) for s in steps] == [0.015, 0.02]
        assert all(math.isfinite(s.extra_metrics["policy_loss"]) for s in steps)
