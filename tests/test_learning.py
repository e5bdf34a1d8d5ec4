"""GRPO really learns: from the shipped demo model, the quickstart's settings raise held-out accuracy."""

import os
import time

import mlx.core as mx
import pytest

from grpo_tui.protocol.config import load_config
from tests.conftest import EXAMPLES

MODEL = EXAMPLES / "models" / "tiny-arith"
STEPS = 30  # GRPO steps with the quickstart's settings
EVAL_ROWS = 200  # held-out prompts, sampled at the training temperature with a fixed seed
MARGIN = 0.10  # absolute accuracy gain the test demands


def held_out_accuracy(trainer) -> float:
    mx.random.seed(1234)
    return trainer.evaluate(limit=EVAL_ROWS, greedy=False)["accuracy"]


@pytest.mark.slow
@pytest.mark.skipif(not (MODEL / "config.json").exists(), reason="the demo model examples/models/tiny-arith is not built yet")
def test_quickstart_grpo_raises_held_out_accuracy():
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from grpo_tui.worker.trainer import Trainer

    config = load_config(EXAMPLES / "quickstart.toml")
    trainer = Trainer(config, log=lambda level, msg: None)
    before = held_out_accuracy(trainer)
    start = time.perf_counter()
    rewards = [trainer.train_step(step).metrics.rewards["accuracy"] for step in range(1, STEPS + 1)]
    seconds_per_step = (time.perf_counter() - start) / STEPS
    after = held_out_accuracy(trainer)
    print(f"held-out accuracy {before:.3f} -> {after:.3f} after {STEPS} steps ({seconds_per_step:.2f} s/step)")
    assert after >= before + MARGIN, (before, after)
    # The training reward climbs too: the last third beats the first third.
    third = STEPS // 3
    assert sum(rewards[-third:]) / third > sum(rewards[:third]) / third
