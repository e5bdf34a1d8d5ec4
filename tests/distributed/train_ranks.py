"""Run under ``mlx.launch`` (or alone): train N steps with the engine's MlxTrainer and write, per rank,
the step metrics and the final trainable weights to ``OUT/rank-R.npz`` (tests/distributed)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import mlx.core as mx
import numpy as np
from mlx.utils import tree_flatten

from grpo_tui.protocol.config import load_config
from grpo_tui.worker.engine.trainer import MlxTrainer


def main() -> None:
    config, out, steps = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
    trainer = MlxTrainer(load_config(config), log=lambda level, msg: print(f"[{level}] {msg}", file=sys.stderr))
    rank = trainer.ranks.rank
    before = {k: np.array(v.astype(mx.float32)) for k, v in tree_flatten(trainer.policy.model.trainable_parameters())}
    metrics = []
    for step in range(1, steps + 1):
        output = trainer.train_step(step)
        m = output.metrics
        metrics.append({
            "loss": m.loss, "reward": m.reward, "reward_std": m.reward_std, "grad_norm": m.grad_norm,
            "advantage_std": m.advantage_std, "entropy": m.entropy, "clip_high": m.clip_ratio.high,
            "length": m.completion_mean_length, "clipped": m.completion_clipped_ratio, "num_tokens": m.num_tokens,
            "frac_zero": m.frac_reward_zero_std,
            "tokens": [g.raw_completion for g in output.generations],
            "dropped": [g.dropped for g in output.generations],
            "extra": m.extra_metrics,
            "rows": trainer.batch(step)[2],
            "visits": [[v.prompt_row, v.pass_rate, v.state] for v in output.prompt_visits],
        })
    weights = {k: np.array(v.astype(mx.float32)) for k, v in tree_flatten(trainer.policy.model.trainable_parameters())}
    np.savez(out / f"rank-{rank}.npz", **weights)
    moved = max(float(np.abs(weights[k] - before[k]).max()) for k in weights)
    report = {"size": trainer.ranks.size, "moved": moved, "metrics": metrics}
    (out / f"rank-{rank}.json").write_text(json.dumps(report))


if __name__ == "__main__":
    main()
