"""Asynchronous GRPO against the synchronous step, through the real worker (docs/async.md).

    nice -n 10 python bench/async_grpo.py [--steps 60] [--guess-steps 40] [--staleness 1 2]

Three cases, each run synchronously (``async.max_staleness = 0``) and with the generator in its own
process ``max_staleness`` 1 and 2 steps ahead, side by side in one run:

- (a) ``quickstart``: examples/quickstart.toml as it is;
- (b) ``slow reward``: the same with one more reward that waits 1 ms per completion and pays nothing
  (bench/async_slow_reward.py), standing for a judge or a sandboxed test run;
- (c) ``guess_sum``: examples/guess_sum.toml, a multi-turn environment.

Each run is ``python -m grpo_tui.worker CONFIG --plain`` with ``--set`` items; its figures come from
its store: steps per second from the steps' commit times (first to last step: loading, the first
step's compilation and the evaluations before and after are left out), and the held-out greedy
accuracy at the last step (guess_sum: the share of held-out episodes won). It prints each run, then
per case each mode's steps per second as a multiple of the synchronous run's, and the goal: (b) at
``max_staleness`` 1 or 2 >= 1.5x the synchronous steps per second with held-out accuracy within
noise. Timing needs a quiet machine (load < 1); ``--quick`` (6 and 4 steps) proves it runs.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import tempfile
import time
from pathlib import Path

from worker_runs import ROOT, finish, run_worker, show
EXAMPLES = ROOT / "examples"


def one_run(case: str, staleness: int, steps: int, args: argparse.Namespace, folder: Path) -> dict:
    out = folder / f"{case.replace(' ', '_')}-{staleness}"
    config = EXAMPLES / ("guess_sum.toml" if case == "guess_sum" else "quickstart.toml")
    if case == "slow reward":  # the quickstart with one more [[rewards]] table, its paths made absolute
        text = config.read_text().replace('path = "models/', f'path = "{EXAMPLES}/models/').replace(
            'path = "data/', f'path = "{EXAMPLES}/data/').replace('eval_path = "data/', f'eval_path = "{EXAMPLES}/data/')
        config = folder / "slow_reward.toml"
        config.write_text(text + f'\n[[rewards]]\nfunction = "{ROOT / "bench" / "async_slow_reward.py"}:wait_1ms"\nweight = 0.0\n')
    items = [f"training.max_steps={steps}", f"async.max_staleness={staleness}", "eval.every=0",
             f"eval.limit={args.eval_limit}", f"checkpoint.output_dir={out}", "checkpoint.save_every=0",
             "checkpoint.resume=false", "training.silent_patience=0", "doctor.enabled=false"]
    wall = run_worker(config, items, f"{case}/staleness {staleness}")
    db = sqlite3.connect(f"file:{out / 'outputs.db'}?mode=ro", uri=True)
    times = [t for (t,) in db.execute("SELECT created_at FROM steps ORDER BY step")]
    parts = db.execute("SELECT avg(generation_ms), avg(scoring_ms), avg(training_ms) FROM steps WHERE step > 2").fetchone()
    extras = [json.loads(e or "{}") for (e,) in db.execute("SELECT extra_metrics FROM steps ORDER BY step")]
    evals = db.execute("SELECT step, accuracy, rewards FROM evals WHERE greedy = 1 ORDER BY step").fetchall()
    db.close()

    def score(row: tuple) -> float | None:
        return json.loads(row[2] or "{}").get("won") if case == "guess_sum" else row[1]

    stale = [e.get("async/staleness_max", 0.0) for e in extras]
    clipped = [e["async/is_clipped"] for e in extras if "async/is_clipped" in e]
    return {"case": case, "staleness": staleness, "steps": len(times),
            "steps_per_s": (len(times) - 1) / (times[-1] - times[0]) if len(times) > 1 else None,
            "accuracy": score(evals[-1]) if evals else None, "start_accuracy": score(evals[0]) if evals else None,
            "max_staleness_seen": max(stale) if stale else 0.0,
            "is_clipped": sum(clipped) / len(clipped) if clipped else None, "wall_s": wall,
            "generation_ms": parts[0], "scoring_ms": parts[1], "training_ms": parts[2],
            "wait_ms": _mean([e["async/wait_ms"] for e in extras[2:] if "async/wait_ms" in e])}


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=60, help="steps of (a) and (b)")
    parser.add_argument("--guess-steps", type=int, default=40, help="steps of (c)")
    parser.add_argument("--staleness", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--eval-limit", type=int, default=200)
    parser.add_argument("--cases", nargs="+", default=["quickstart", "slow reward", "guess_sum"])
    parser.add_argument("--quick", action="store_true", help="6 and 4 steps, 40 held-out rows: proves it runs")
    parser.add_argument("--json", type=Path, help="also write every run's figures here")
    args = parser.parse_args()
    if args.quick:
        args.steps, args.guess_steps, args.eval_limit = 6, 4, 40
    load = os.getloadavg()[0]
    print(f"load {load:.2f}; {args.steps} steps ((a), (b)), {args.guess_steps} steps ((c)), greedy eval of "
          f"{args.eval_limit} held-out rows before and after")
    runs = []
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-async-") as tmp:
        for case in args.cases:
            for staleness in [0, *args.staleness]:
                r = one_run(case, staleness, args.guess_steps if case == "guess_sum" else args.steps, args, Path(tmp))
                runs.append(r)
                print(f"{case:11} max_staleness {staleness}: {show(r['steps_per_s'], '.2f')} steps/s, held-out "
                      f"{show(r['start_accuracy'], '.1%')} -> {show(r['accuracy'], '.1%')}, staleness seen "
                      f"{r['max_staleness_seen']:.0f}, IS clipped {show(r['is_clipped'], '.1%')}; per step (after the "
                      f"second) generation {show(r['generation_ms'], '.0f')} ms, scoring {show(r['scoring_ms'], '.0f')} ms, "
                      f"training {show(r['training_ms'], '.0f')} ms, learner waiting {show(r['wait_ms'], '.0f')} ms "
                      f"(process {r['wall_s']:.1f} s)", flush=True)
    print(f"\n{'case':11} {'staleness':>9} {'steps/s':>8} {'x sync':>7} {'held-out':>9}")
    goals = []
    for case in args.cases:
        rows = [r for r in runs if r["case"] == case]
        base = rows[0]["steps_per_s"]
        for r in rows:
            ratio = r["steps_per_s"] / base if r["steps_per_s"] and base else None
            r["x_sync"] = ratio
            print(f"{case:11} {r['staleness']:>9} {show(r['steps_per_s'], '.2f'):>8} {show(ratio, '.2f'):>7} "
                  f"{show(r['accuracy'], '.1%'):>9}")
        if case == "slow reward":
            best = max(rows[1:], key=lambda r: r["x_sync"] or 0.0, default=None)
            if best is not None:
                goals.append(f"(b) slow reward: max_staleness {best['staleness']} runs {show(best['x_sync'], '.2f')}x the "
                             f"synchronous steps per second (goal >= 1.5x), held-out {show(best['accuracy'], '.1%')} vs "
                             f"{show(rows[0]['accuracy'], '.1%')}: {'met' if (best['x_sync'] or 0) >= 1.5 else 'missed'}")
    finish(goals, load, t0, runs, args.json)


if __name__ == "__main__":
    main()
