"""What a live change costs (docs/steering.md): the time from ``grpo-tui set`` to the first step that
uses the value, and the cost of a change that builds the compiled functions again.

    python bench/steer.py examples/quickstart.toml --changes 5
    python bench/steer.py --tiny                    # the bundled tiny model, to see that it works

It starts the run detached in a temporary folder (``grpo-tui run CONFIG --detach``), lets it warm up,
then ``--changes`` times: ``grpo-tui set RUN_DIR training.learning_rate=…`` (no recompile), timed from
the call to the first ``step`` frame in ``run.jsonl`` with that rate; and ``generation.temperature=…``
(the loss is traced again), with the step time of the step that applies it against the median step
and the build time the worker logs. The expected delay of the first is at most the rest of the
running step plus one step.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CLI = [sys.executable, "-m", "grpo_tui.tui.cli"]


def frames(out: Path) -> list[dict]:  # type: ignore[type-arg]
    try:
        return [json.loads(line) for line in (out / "run.jsonl").read_text().splitlines() if line.strip()]
    except (OSError, json.JSONDecodeError):
        return []


def wait_for(out: Path, check, timeout: float = 600.0):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check(frames(out))
        if found is not None:
            return found
        time.sleep(0.02)
    raise SystemExit(f"timed out waiting in {out}")


def grpo_set(out: Path, item: str) -> int:
    """``grpo-tui set``: the step the change applies from."""
    done = subprocess.run([*CLI, "set", str(out), item], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(done.stderr)
    return int(done.stdout.split(" from step ")[1].split()[0])


def step_ms(frame: dict) -> float:  # type: ignore[type-arg]
    return sum(frame.get(k) or 0.0 for k in ("generation_ms", "scoring_ms", "training_ms"))


def tiny_config(folder: Path) -> Path:
    sys.path.insert(0, str(ROOT))
    from tests.helpers.worker_harness import write_config

    return write_config(folder, ROOT / "examples" / "models" / "tiny-arith",
                        training={"max_steps": 100000, "num_epochs": 20000, "silent_patience": 0},
                        checkpoint={"save_every": 0})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("config", nargs="?", help="a run's config (its output folder is replaced by a temporary one)")
    parser.add_argument("--tiny", action="store_true", help="the bundled tiny model instead of a config")
    parser.add_argument("--changes", type=int, default=3, help="how many changes of each kind")
    parser.add_argument("--warmup", type=int, default=3, help="steps before the first change")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="steer-"))
    config = tiny_config(work) if args.tiny or not args.config else Path(args.config).resolve()
    out = work / "out"
    sets = ["--set", f"checkpoint.output_dir={out}", "--set", "checkpoint.save_every=0"]
    started = subprocess.run([*CLI, "run", str(config), "--detach", *sets], capture_output=True, text=True, cwd=work)
    if started.returncode != 0:
        raise SystemExit(started.stderr)
    try:
        wait_for(out, lambda fs: True if sum(f["type"] == "step" for f in fs) >= args.warmup else None)
        delays, rates = [], [1e-3 * (0.5 ** i) for i in range(1, args.changes + 1)]
        for rate in rates:
            began = time.monotonic()
            applies = grpo_set(out, f"training.learning_rate={rate!r}")
            wait_for(out, lambda fs: next((f for f in fs if f["type"] == "step" and f["step"] >= applies
                                           and abs((f.get("learning_rate") or 0) - rate) <= rate * 1e-5), None))
            delays.append(time.monotonic() - began)
        ratios, builds = [], []
        for i in range(args.changes):
            applies = grpo_set(out, f"generation.temperature={0.9 - 0.1 * i:.2f}")
            steps = wait_for(out, lambda fs: [f for f in fs if f["type"] == "step"]
                             if any(f["type"] == "step" and f["step"] == applies + 1 for f in fs) else None)
            before = [step_ms(f) for f in steps if applies - 6 <= f["step"] < applies]
            [changed] = [step_ms(f) for f in steps if f["step"] == applies]
            ratios.append(changed / statistics.median(before))
            logs = [f["message"] for f in frames(out) if f["type"] == "log" and "built again" in f["message"]]
            builds.append(float(logs[-1].split(" in ")[1].split(" s")[0]) if logs else float("nan"))
        typical = statistics.median(step_ms(f) for f in frames(out) if f["type"] == "step") / 1000
        print(f"median step: {typical:.3f} s")
        print(f"set -> first step using it: median {statistics.median(delays):.3f} s, max {max(delays):.3f} s "
              f"(the grpo-tui set process's own start included; the run's part is at most the rest of the "
              f"running step plus one step, <= {2 * typical:.3f} s here)")
        print(f"a recompiling change (generation.temperature): the step that applies it takes "
              f"{statistics.median(ratios):.2f}x the median step; the worker's build time {statistics.median(builds):.3f} s")
    finally:  # the supervisor stops its worker on SIGTERM (after the running step)
        record = out / ".control" / "supervisor.json"
        if record.exists():
            pid = json.loads(record.read_text()).get("pid", 0)
            if pid:
                try:
                    os.kill(pid, 15)
                except ProcessLookupError:
                    pass


if __name__ == "__main__":
    main()
