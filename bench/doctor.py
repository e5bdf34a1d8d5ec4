"""The run doctor's cost (docs/doctor.md): per step on the quickstart, and offline on a large store.

    .venv/bin/python bench/doctor.py                 # both parts (~2 min; the store is built once)
    .venv/bin/python bench/doctor.py --part step     # the quickstart with the doctor on and off, alternating
    .venv/bin/python bench/doctor.py --part offline  # grpo-tui doctor on a 10,000-step, 500,000-generation store

``step``: the worker's plain quickstart run twice with the doctor on and twice off, alternating, and
the doctor's own time per step measured in process on the same run's frames (``Doctor.feed`` over
the real steps and generations read back from its store). Target: at most 2 % of a step.
``offline``: ``grpo-tui doctor RUN_DIR`` (the CLI, a fresh process) on a store of 10,000 steps × 50
generations. Target: under 5 s.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
CLI = [sys.executable, "-m", "grpo_tui.tui.cli"]


def quickstart_run(folder: Path, doctor: bool, steps: int) -> float:
    out = folder / ("on" if doctor else "off")
    started = time.perf_counter()
    done = subprocess.run([*CLI, "worker", str(ROOT / "examples" / "quickstart.toml"), "--plain",
                           "--set", f"checkpoint.output_dir={json.dumps(str(out))}", "--set", f"training.max_steps={steps}",
                           "--set", f"doctor.enabled={'true' if doctor else 'false'}", "--set", "checkpoint.resume=false"],
                          capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        raise SystemExit(done.stderr[-2000:])
    return time.perf_counter() - started


def feed_time(store: Path, config_path: Path) -> tuple[float, int]:
    """The doctor's own seconds per step over a run's real steps (read back from its store)."""
    from grpo_tui.common.doctor import Doctor
    from grpo_tui.protocol.config import load_config
    from grpo_tui.tui.doctor_report import _generations
    from grpo_tui.protocol.schema import STEP_METRIC_COLUMNS, step_from_row
    from grpo_tui.tui.db.store import open_readonly
    from grpo_tui.common.doctor import StepFacts

    config = load_config(config_path)
    conn = open_readonly(store)
    gens = _generations(conn, 1, 0)
    rows = [dict(r) for r in conn.execute(f"SELECT step, epoch, {', '.join(STEP_METRIC_COLUMNS)} FROM steps ORDER BY step")]
    facts = [StepFacts(r["step"], step_from_row(r), gens.get(r["step"], [])) for r in rows]
    doctor = Doctor(config)
    started = time.perf_counter()
    for f in facts:
        doctor.feed(f)
    return (time.perf_counter() - started) / max(len(facts), 1), len(facts)


def part_step(steps: int, rounds: int) -> None:
    folder = ROOT / ".bench" / "doctor-step"
    walls: dict[bool, list[float]] = {True: [], False: []}
    for _ in range(rounds):
        for doctor in (True, False):
            walls[doctor].append(quickstart_run(folder, doctor, steps))
    on, off = statistics.median(walls[True]), statistics.median(walls[False])
    per_step, count = feed_time(folder / "on" / "outputs.db", ROOT / "examples" / "quickstart.toml")
    step_s = off / steps
    print(f"quickstart {steps} steps, median of {rounds}: doctor on {on:.2f} s, off {off:.2f} s (ratio {on / off:.3f}; "
          "whole runs, start-up and evaluations included)")
    print(f"Doctor.feed over the run's {count} real steps: {1000 * per_step:.3f} ms a step = "
          f"{100 * per_step / step_s:.2f} % of a step ({1000 * step_s:.0f} ms; target <= 2 %)")


def part_offline() -> None:
    from tests.tui.db.make_store import RunSpec, build_store

    folder = ROOT / ".bench" / "doctor-offline"
    store = folder / "outputs.db"
    if not store.exists():
        folder.mkdir(parents=True, exist_ok=True)
        print("building a 10,000-step, 500,000-generation store (once)...", flush=True)
        build_store(store, [RunSpec("large", steps=10_000, prompts=10, group=5)])
    if not (folder / "run.jsonl").exists():
        config = {"model": {"path": "m"}, "data": {"path": "d.jsonl"}, "rewards": [{"name": "accuracy"}],
                  "checkpoint": {"output_dir": str(folder)}, "grpo": {"group_size": 5}}
        (folder / "run.jsonl").write_text(json.dumps({"type": "init", "model": "m", "model_path": "m", "config": config,
                                                      "dataset_size": 10, "steps_per_epoch": 1, "total_steps": 10_000,
                                                      "num_epochs": 1, "output_dir": str(folder)},
                                                     separators=(",", ":")) + "\n")  # the frame's own layout
    times = []
    for _ in range(3):
        started = time.perf_counter()
        done = subprocess.run([*CLI, "doctor", str(folder)], capture_output=True, text=True, env={**os.environ})
        times.append(time.perf_counter() - started)
        if done.returncode not in (0, 10, 11):
            raise SystemExit(done.stderr[-2000:])
    print(f"grpo-tui doctor on 10,000 steps / 500,000 generations: median {statistics.median(times):.2f} s of 3 "
          f"(worst {max(times):.2f} s; target < 5 s); it said: {done.stdout.splitlines()[1]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--part", choices=("step", "offline", "all"), default="all")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    if args.part in ("step", "all"):
        part_step(args.steps, args.rounds)
    if args.part in ("offline", "all"):
        part_offline()


if __name__ == "__main__":
    main()
