"""One generation for several steps (``training.steps_per_generation``) against a generation per
step, on the quickstart: training wall and CPU time per step, and held-out accuracy.

    nice -n 10 python bench/generation_reuse.py [--reuse 1 2 4] [--seeds 0 1] [--steps 200]

Each (steps_per_generation, seed) trains the quickstart's model for ``--steps`` steps in a fresh
process with the engine's MlxTrainer (the quickstart's config; ``training.seed`` and ``data.seed`` =
the seed), then scores the 200 held-out prompts greedily and sampled (one completion each, sampling
seed fixed). It prints one line per run, then a mean per setting with its time ratio to
``steps_per_generation = 1`` measured in the same run of this script. The rollout of a reused
generation batches the block's steps' prompts; its later steps train off-policy.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # tests.helpers.evaluation
QUICKSTART = ROOT / "examples" / "quickstart.toml"


def one_run(reuse: int, seed: int, steps: int) -> dict:
    from grpo_tui.common.blas import reexec_if_needed

    reexec_if_needed()
    import mlx.core as mx

    from grpo_tui.protocol.config import load_config
    from grpo_tui.worker.engine.trainer import MlxTrainer
    from tests.helpers.evaluation import reward_means

    config = load_config(QUICKSTART)
    config.training.seed = config.data.seed = seed
    config.training.max_steps = steps
    config.training.steps_per_generation = reuse
    trainer = MlxTrainer(config, log=lambda level, message: None)
    t0, c0 = time.perf_counter(), time.process_time()
    generation_ms = 0.0
    for step in range(1, steps + 1):
        generation_ms += trainer.train_step(step).metrics.generation_ms
    train_s, cpu_s = time.perf_counter() - t0, time.process_time() - c0
    greedy = reward_means(trainer, 200, greedy=True)["accuracy"]
    mx.random.seed(12345)
    sampled = reward_means(trainer, 200, greedy=False)["accuracy"]
    return {"reuse": reuse, "seed": seed, "greedy": greedy, "sampled": sampled, "train_s": train_s, "cpu_s": cpu_s,
            "generation_s": generation_ms / 1000}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reuse", type=int, nargs="+", default=[1, 2, 4], help="steps_per_generation values")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--one", nargs=2, type=int, metavar=("REUSE", "SEED"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one_run(args.one[0], args.one[1], args.steps)))
        return
    reuses = sorted(set(args.reuse) | {1})
    results = []
    for seed in args.seeds:
        for reuse in reuses:
            out = subprocess.run([sys.executable, __file__, "--one", str(reuse), str(seed), "--steps", str(args.steps)],
                                 capture_output=True, text=True, check=True)
            r = json.loads(out.stdout.strip().splitlines()[-1])
            results.append(r)
            print(f"steps_per_generation {reuse} seed {seed}: train {r['train_s']:6.1f} s ({r['cpu_s']:6.1f} CPU-s, "
                  f"rollouts {r['generation_s']:5.1f} s)  greedy {r['greedy']:.3f} sampled {r['sampled']:.3f}", flush=True)
    print()
    base: dict[str, float] = {}
    for reuse in reuses:
        rs = [r for r in results if r["reuse"] == reuse]
        mean = {k: sum(r[k] for r in rs) / len(rs) for k in ("greedy", "sampled", "train_s", "cpu_s", "generation_s")}
        base = base or mean
        print(f"steps_per_generation {reuse} mean of {len(rs)}: {1000 * mean['train_s'] / args.steps:.1f} ms/step "
              f"(x{base['train_s'] / mean['train_s']:.2f} vs 1; CPU x{base['cpu_s'] / mean['cpu_s']:.2f}; "
              f"rollouts x{base['generation_s'] / mean['generation_s']:.2f})  greedy {mean['greedy']:.3f} sampled {mean['sampled']:.3f}")


if __name__ == "__main__":
    main()
