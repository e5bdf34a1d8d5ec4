"""The same global batch on 1 and 2 local ranks (mlx.launch, ring): step time, all-reduce time and
bytes moved per step.

    python bench/scale_out.py examples/quickstart.toml --steps 8

Both runs use ``gradient_accumulation_steps = 2`` (the micro-batch is the unit of distribution),
so they train on identical micro-batches; the first step (compilation) is left out of the means.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def inner(config_path: str, steps: int) -> None:
    """One rank's run (under mlx.launch, or alone); rank 0 prints one JSON line."""
    from grpo_tui.common.blas import reexec_if_needed

    reexec_if_needed()
    from grpo_tui.protocol.config import load_config
    from grpo_tui.worker.engine.trainer import MlxTrainer

    config = load_config(config_path)
    config.training.gradient_accumulation_steps = 2
    trainer = MlxTrainer(config, log=lambda level, message: None)
    rows = []
    for step in range(1, steps + 1):
        t0 = time.perf_counter()
        m = trainer.train_step(step).metrics
        wall = time.perf_counter() - t0
        comm = max((r.all_reduce_ms for r in m.ranks), default=0.0)
        rows.append({"wall_s": wall, "all_reduce_ms": comm, "bytes": m.all_reduce_bytes, "loss": m.loss,
                     "generation_ms": m.generation_ms, "training_ms": m.training_ms})
    if trainer.ranks.rank == 0:
        print("RESULT " + json.dumps({"ranks": trainer.ranks.size, "rows": rows}), flush=True)


def outer(config: str, steps: int) -> None:
    sys.path.insert(0, str(ROOT.parent))
    from grpo_tui.worker.ranks import launch_command

    for n in (1, 2):
        command = launch_command([sys.executable, __file__, config, "--steps", str(steps), "--inner"], ranks=n)
        done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
        line = next((x for x in done.stdout.splitlines() if x.startswith("RESULT ")), None)
        if line is None:
            print(f"{n} rank(s) failed:\n{done.stderr[-2000:]}")
            continue
        rows = json.loads(line[7:])["rows"][1:]  # the first step compiles
        mean = lambda key: sum(r[key] for r in rows) / len(rows)  # noqa: E731
        print(
            f"{n} rank(s): {mean('wall_s'):.2f} s/step (generation {mean('generation_ms'):.0f} ms, "
            f"training {mean('training_ms'):.0f} ms, all-reduce {mean('all_reduce_ms'):.0f} ms, "
            f"{mean('bytes') / 1e6:.2f} MB sent per rank per step) over {len(rows)} steps; "
            f"losses {[round(r['loss'], 5) for r in rows]}",
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("config")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    (inner if args.inner else outer)(args.config, args.steps)


if __name__ == "__main__":
    main()
