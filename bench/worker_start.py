"""What a worker process costs before it trains: the imports, then a one-step quickstart run.

    .venv/bin/python bench/worker_start.py             # 10 of each (~1 min on two quiet cores)
    .venv/bin/python bench/worker_start.py --runs 2    # a check that it works

Most tests that start a real worker (``python -m grpo_tui.worker``, ``grpo-tui worker --plain``) train
a few steps of a tiny model, so their time is mostly this start. ``import``: a fresh interpreter that
imports the engine (``grpo_tui.worker.engine.trainer``, what the worker's MLX thread imports first),
its CPU seconds. ``one step``: the quickstart cut to one step, no eval, no checkpoint, the worker's
own process (CPU seconds of the child, and wall seconds). CPU seconds are quoted because they move
less than wall time with the machine's load; the median of ``--runs``.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def child_cpu(argv: list[str]) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of one child process run to its end."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL, cwd=ROOT)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(done.stdout[-2000:] + done.stderr[-2000:])
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    imports, steps, walls = [], [], []
    with tempfile.TemporaryDirectory(prefix="worker-start-") as tmp:
        for i in range(args.runs):
            imports.append(child_cpu([sys.executable, "-c", "import grpo_tui.worker.engine.trainer"])[0])
            out = Path(tmp) / f"run{i}"
            cpu, wall = child_cpu([
                sys.executable, "-m", "grpo_tui.worker", str(ROOT / "examples" / "quickstart.toml"), "--plain",
                "--set", f"checkpoint.output_dir={json.dumps(str(out))}", "--set", "training.max_steps=1",
                "--set", "eval.every=0", "--set", "checkpoint.save_every=0", "--set", "checkpoint.resume=false",
            ])  # fmt: skip
            steps.append(cpu)
            walls.append(wall)
    print(f"import the engine: {statistics.median(imports):.2f} s CPU (median of {args.runs})")
    print(f"one-step quickstart worker: {statistics.median(steps):.2f} s CPU, {statistics.median(walls):.2f} s wall "
          f"(median of {args.runs})")


if __name__ == "__main__":
    main()
