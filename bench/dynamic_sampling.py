"""Dynamic sampling against plain GRPO on the quickstart: held-out accuracy and wall time.

    nice -n 10 python bench/dynamic_sampling.py [--seeds 0 1 2] [--steps 200] [--rounds 3]

Each (mode, seed) trains the quickstart's model for ``--steps`` steps in a fresh process with the
engine's MlxTrainer (the quickstart's config; ``training.seed`` and ``data.seed`` = the seed), then
scores the 200 held-out prompts greedily and sampled (one completion each, sampling seed fixed).
It prints one line per run and a mean per mode: accuracy, training wall time and CPU time (rollouts,
scoring, updates; no evaluation; the CPU time is the steadier figure on a shared machine),
completions generated and, with dynamic sampling, the mean rounds per step.
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


def one_run(mode: str, seed: int, steps: int, rounds: int) -> dict:
    from grpo_tui.common.blas import reexec_if_needed

    reexec_if_needed()
    import mlx.core as mx

    from grpo_tui.protocol.config import load_config
    from grpo_tui.worker.engine.trainer import MlxTrainer
    from tests.helpers.evaluation import reward_means

    config = load_config(QUICKSTART)
    config.training.seed = config.data.seed = seed
    config.training.max_steps = steps
    config.grpo.dynamic_sampling = mode == "dynamic"
    config.grpo.max_sampling_rounds = rounds
    trainer = MlxTrainer(config, log=lambda level, message: None)
    t0, c0 = time.perf_counter(), time.process_time()
    generated, round_counts, short = 0, [], 0
    for step in range(1, steps + 1):
        m = trainer.train_step(step).metrics
        generated += int(m.extra_metrics.get("sampling/generated_completions", len(m.completion_rewards)))
        round_counts.append(m.extra_metrics.get("sampling/rounds", 1.0))
        short += m.extra_metrics.get("sampling/rounds", 0) == rounds and mode == "dynamic"
    train_s, cpu_s = time.perf_counter() - t0, time.process_time() - c0
    greedy = reward_means(trainer, 200, greedy=True)["accuracy"]
    mx.random.seed(12345)
    sampled = reward_means(trainer, 200, greedy=False)["accuracy"]
    return {"mode": mode, "seed": seed, "greedy": greedy, "sampled": sampled, "train_s": train_s, "cpu_s": cpu_s,
            "generated": generated, "rounds": sum(round_counts) / len(round_counts), "steps_at_max_rounds": short}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3, help="max_sampling_rounds")
    parser.add_argument("--one", nargs=2, metavar=("MODE", "SEED"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one_run(args.one[0], int(args.one[1]), args.steps, args.rounds)))
        return
    results = []
    for seed in args.seeds:
        for mode in ("plain", "dynamic"):
            out = subprocess.run([sys.executable, __file__, "--one", mode, str(seed), "--steps", str(args.steps),
                                  "--rounds", str(args.rounds)], capture_output=True, text=True, check=True)
            r = json.loads(out.stdout.strip().splitlines()[-1])
            results.append(r)
            print(f"{mode:8s} seed {seed}: greedy {r['greedy']:.3f} sampled {r['sampled']:.3f} "
                  f"train {r['train_s']:6.1f} s ({r['cpu_s']:6.1f} CPU-s)  completions {r['generated']:6d}  rounds/step {r['rounds']:.2f}  "
                  f"steps at max rounds {r['steps_at_max_rounds']}", flush=True)
    print()
    for mode in ("plain", "dynamic"):
        rs = [r for r in results if r["mode"] == mode]
        keys = ("greedy", "sampled", "train_s", "cpu_s", "generated", "rounds")
        mean = {k: sum(r[k] for r in rs) / len(rs) for k in keys}
        print(f"{mode:8s} mean of {len(rs)}: greedy {mean['greedy']:.3f} sampled {mean['sampled']:.3f} "
              f"train {mean['train_s']:.1f} s ({mean['cpu_s']:.1f} CPU-s)  completions {mean['generated']:.0f}  rounds/step {mean['rounds']:.2f}")


if __name__ == "__main__":
    main()
