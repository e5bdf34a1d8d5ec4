"""Run N GRPO steps with the engine's MlxTrainer directly and print one line per step.

    python bench/quick_grpo.py examples/quickstart.toml --steps 20 --eval 200

With ``--eval N`` it also prints the held-out accuracy (greedy and sampled at the config's temperature,
first N eval prompts) before and after, and the mean seconds per step. Nothing is saved.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests.helpers.evaluation

from grpo_tui.common.blas import reexec_if_needed  # noqa: E402

reexec_if_needed()  # an optimized BLAS for mlx[cpu] on Linux, before MLX is imported

from grpo_tui.protocol.config import load_config  # noqa: E402
from grpo_tui.worker.engine.trainer import MlxTrainer  # noqa: E402
from tests.helpers.evaluation import reward_means  # noqa: E402


def held_out(trainer: MlxTrainer, n: int) -> str:
    import mlx.core as mx

    greedy = reward_means(trainer, n, greedy=True)
    mx.random.seed(12345)
    sampled = reward_means(trainer, n, greedy=False)
    return " ".join(f"{k}: greedy {greedy[k]:.3f} sampled {sampled[k]:.3f}" for k in greedy if greedy[k] is not None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("config")
    parser.add_argument("--steps", type=int, default=0, help="0 = the config's total steps")
    parser.add_argument("--eval", type=int, default=0, help="held-out prompts to score before/after")
    args = parser.parse_args()

    trainer = MlxTrainer(load_config(args.config), log=lambda level, msg: print(f"[{level}] {msg}", file=sys.stderr))
    steps = args.steps or trainer.total_steps
    if args.eval:
        print(f"before: {held_out(trainer, args.eval)}", flush=True)
    times = []
    for step in range(1, steps + 1):
        t0 = time.perf_counter()
        m = trainer.train_step(step).metrics
        times.append(time.perf_counter() - t0)
        rewards = " ".join(f"{k}={v:.2f}" for k, v in m.rewards.items() if v is not None)
        print(
            f"step {step:3d} {times[-1]:5.2f}s loss={m.loss if m.loss is None else round(m.loss, 4)} "
            f"reward={m.reward:.3f}±{m.reward_std:.2f} {rewards} len={m.completion_mean_length:.1f} "
            f"clipped={m.completion_clipped_ratio:.2f} entropy={m.entropy:.2f} grad_norm={m.grad_norm:.3f} "
            f"gen={m.generation_ms:.0f}ms train={m.training_ms:.0f}ms",
            flush=True,
        )
    print(f"mean {sum(times) / len(times):.2f} s/step over {len(times)} steps")
    if args.eval:
        print(f"after: {held_out(trainer, args.eval)}", flush=True)


if __name__ == "__main__":
    main()
