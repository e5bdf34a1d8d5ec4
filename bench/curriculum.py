"""The pass-rate curriculum against uniform sampling and dynamic sampling, through the real worker.

    nice -n 10 python bench/curriculum.py [--seeds 0 1 2] [--steps 200] [--eval-every 10]

Two sets, the quickstart's model on each: ``quick``, the first 400 rows of the quickstart's data
(so that prompts come back: 200 steps of 8 prompts are four passes), held out: its 200 eval rows;
``mixed``, the example builder's mixed-difficulty set (``examples/data/mixed.jsonl``: 200 easy sums
beside 200 products the model never saw; held out: ``mixed_eval.jsonl``, 100 of each). Four modes:
``uniform`` (the seeded shuffle), ``dynamic`` (grpo.dynamic_sampling), ``curriculum``
(curriculum.strategy = "pass_rate", its defaults) and ``both``. Each (set, mode, seed) is one
``python -m grpo_tui.worker --plain`` run of the quickstart's config with ``--set`` items
(training.seed = data.seed = the seed), evaluated greedily on the held-out rows every
``--eval-every`` steps; the figures are read from its store:

- equal-reward share: the generated groups whose rewards were all equal (TRL's
  ``frac_reward_zero_std`` times the step's groups, summed) over all generated groups;
- generations: completions generated (dynamic sampling's extra rounds included);
- greedy accuracy at the last step (``accuracy``, the ``accuracy`` reward's mean);
- seconds to target: training seconds (rollout, scoring and update of every step up to it;
  evaluations and the store excluded) until the held-out greedy accuracy first reaches the set's
  target (``--target-quick``, ``--target-mixed``); "-" when it never does.

It prints a line per run, then per set a mean per mode with each mode's time as a multiple of
uniform's, and the issue's goals: on ``quick`` the curriculum has >= 30 % fewer equal-reward groups
than uniform with greedy accuracy no lower; on ``mixed`` it reaches the target in <= 0.7x uniform's time.
Timing needs a quiet machine (load < 1); ``--steps 6 --eval-every 3 --seeds 0`` proves it runs.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path

from worker_runs import ROOT, finish, run_worker, show

EXAMPLES = ROOT / "examples"
QUICKSTART = EXAMPLES / "quickstart.toml"
MODES = {
    "uniform": [],
    "dynamic": ["grpo.dynamic_sampling=true"],
    "curriculum": ["curriculum.strategy=pass_rate"],
    "both": ["curriculum.strategy=pass_rate", "grpo.dynamic_sampling=true"],
}


def sets(folder: Path) -> dict[str, tuple[Path, Path]]:
    """(train, held-out) files of each set; ``quick``'s 400-row slice is written into ``folder``."""
    quick = folder / "quick400.jsonl"
    quick.write_text("".join((EXAMPLES / "data" / "arith.jsonl").read_text().splitlines(keepends=True)[:400]))
    return {"quick": (quick, EXAMPLES / "data" / "arith_eval.jsonl"),
            "mixed": (EXAMPLES / "data" / "mixed.jsonl", EXAMPLES / "data" / "mixed_eval.jsonl")}


def one_run(name: str, files: tuple[Path, Path], mode: str, seed: int, args: argparse.Namespace, folder: Path) -> dict:
    out = folder / f"{name}-{mode}-{seed}"
    items = [f"data.path={files[0]}", f"data.eval_path={files[1]}", f"training.max_steps={args.steps}",
             f"training.seed={seed}", f"data.seed={seed}", f"eval.every={args.eval_every}", f"eval.limit={args.eval_limit}",
             "eval.greedy=true", f"checkpoint.output_dir={out}", "checkpoint.save_every=0", "checkpoint.resume=false",
             "training.silent_patience=0", "doctor.enabled=false", *MODES[mode],
             *(args.curriculum_set if "curriculum" in mode or mode == "both" else [])]
    wall = run_worker(QUICKSTART, items, f"{name}/{mode}/seed {seed}")
    db = sqlite3.connect(f"file:{out / 'outputs.db'}?mode=ro", uri=True)
    steps = db.execute("SELECT step, frac_reward_zero_std, generation_ms, scoring_ms, training_ms, extra_metrics "
                       "FROM steps ORDER BY step").fetchall()
    evals = db.execute("SELECT step, accuracy FROM evals WHERE greedy = 1 ORDER BY step").fetchall()
    db.close()
    group_size, batch = 8, 8  # the quickstart's
    flat = groups = 0.0
    seconds, clock = {0: 0.0}, 0.0
    for step, frac, gen_ms, score_ms, train_ms, extra in steps:
        extra = json.loads(extra or "{}")
        n = extra.get("sampling/generated_completions", group_size * batch) / group_size
        groups += n
        flat += (frac or 0.0) * n
        clock += ((gen_ms or 0) + (score_ms or 0) + (train_ms or 0)) / 1000
        seconds[step] = clock
    target = args.target_quick if name == "quick" else args.target_mixed
    reached = next((s for s, acc in evals if acc is not None and acc >= target), None)
    return {"set": name, "mode": mode, "seed": seed, "flat": flat, "groups": groups, "flat_share": flat / max(groups, 1),
            "generations": int(groups * group_size), "accuracy": evals[-1][1] if evals else None,
            "start_accuracy": evals[0][1] if evals else None, "to_target_s": None if reached is None else seconds[reached],
            "to_target_step": reached, "train_s": clock, "wall_s": wall}


def mean(values: list) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.fmean(values) if values else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--eval-every", type=int, default=10)
    parser.add_argument("--eval-limit", type=int, default=200)
    parser.add_argument("--target-quick", type=float, default=0.60, help="held-out greedy accuracy on quick")
    parser.add_argument("--target-mixed", type=float, default=0.30, help="held-out greedy accuracy on mixed")
    parser.add_argument("--sets", nargs="+", default=["quick", "mixed"], choices=["quick", "mixed"])
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=list(MODES))
    parser.add_argument("--curriculum-set", action="append", default=[], metavar="KEY=VALUE",
                        help="a --set item for the curriculum's runs, e.g. curriculum.revisit_probability=0.05")
    parser.add_argument("--json", type=Path, help="also write every run's figures here")
    args = parser.parse_args()
    load = os.getloadavg()[0]
    print(f"load {load:.2f}; {args.steps} steps, greedy eval of {args.eval_limit} held-out rows every {args.eval_every}")
    runs = []
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-curriculum-") as tmp:
        folder = Path(tmp)
        for name, files in sets(folder).items():
            if name not in args.sets:
                continue
            for seed in args.seeds:
                for mode in args.modes:
                    r = one_run(name, files, mode, seed, args, folder)
                    runs.append(r)
                    print(f"{name:5} {mode:10} seed {seed}: equal-reward {r['flat_share']:.1%} ({r['flat']:.0f} of "
                          f"{r['groups']:.0f} groups), {r['generations']} generations, greedy accuracy "
                          f"{show(r['start_accuracy'], '.1%')} -> {show(r['accuracy'], '.1%')}, target at step "
                          f"{show(r['to_target_step'], 'd')} after {show(r['to_target_s'], '.1f')} s "
                          f"(training {r['train_s']:.1f} s, process {r['wall_s']:.1f} s)", flush=True)
    goals = []
    for name in args.sets:
        print(f"\n{name}: mean over seeds {args.seeds}")
        print(f"{'mode':10} {'equal-reward':>12} {'generations':>11} {'greedy acc':>10} {'to target s':>11} {'x uniform':>9}")
        by_mode = {mode: [r for r in runs if r["set"] == name and r["mode"] == mode] for mode in args.modes}
        base = mean([r["to_target_s"] for r in by_mode.get("uniform", [])])
        for mode, rs in by_mode.items():
            t = mean([r["to_target_s"] for r in rs])
            reached = sum(r["to_target_s"] is not None for r in rs)
            ratio = None if t is None or not base else t / base
            print(f"{mode:10} {mean([r['flat_share'] for r in rs]):>12.1%} {mean([r['generations'] for r in rs]):>11.0f} "
                  f"{show(mean([r['accuracy'] for r in rs]), '.1%'):>10} {show(t, '.1f'):>11} {show(ratio, '.2f'):>9}"
                  f"{'' if reached == len(rs) else f'  (reached by {reached} of {len(rs)} seeds)'}")
        if {"uniform", "curriculum"} <= set(by_mode):
            u, c = by_mode["uniform"], by_mode["curriculum"]
            if name == "quick":
                fewer = 1 - sum(r["flat"] for r in c) / max(sum(r["flat"] for r in u), 1)
                kept = mean([r["accuracy"] for r in c]) >= mean([r["accuracy"] for r in u])
                goals.append(f"quick: the curriculum has {fewer:.0%} fewer equal-reward groups than uniform (goal >= 30 %), "
                             f"greedy accuracy {'no lower' if kept else 'LOWER'}: "
                             f"{'met' if fewer >= 0.30 and kept else 'missed'}")
            else:
                ct, ut = mean([r["to_target_s"] for r in c]), mean([r["to_target_s"] for r in u])
                ratio = None if ct is None or not ut else ct / ut
                goals.append(f"mixed: the curriculum reaches {args.target_mixed:.0%} in {show(ratio, '.2f')}x uniform's "
                             f"time (goal <= 0.7x): {'met' if ratio is not None and ratio <= 0.7 else 'missed'}")
    finish(goals, load, t0, runs, args.json)


if __name__ == "__main__":
    main()
