"""What the benches that train through the real worker share (``curriculum.py``, ``async_grpo.py``):
one ``python -m grpo_tui.worker CONFIG --plain`` run with ``--set`` items, and the report's end."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run_worker(config: Path, items: list[str], what: str) -> float:
    """Train ``config`` with ``items``; its wall seconds. Exits naming ``what`` when the worker fails."""
    command = [sys.executable, "-m", "grpo_tui.worker", str(config), "--plain"]
    for item in items:
        command += ["--set", item]
    t0 = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    if done.returncode != 0:
        raise SystemExit(f"{what}: the worker exited {done.returncode}\n{done.stderr[-3000:]}")
    return time.perf_counter() - t0


def show(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def finish(goals: list[str], load: float, t0: float, runs: list[dict], path: Path | None) -> None:
    """The goals, the load at the start and end, the whole time; every run's figures to ``path``."""
    print()
    for line in goals:
        print(line)
    print(f"load {os.getloadavg()[0]:.2f} at the end (started at {load:.2f}); {time.perf_counter() - t0:.0f} s in all")
    if path:
        path.write_text(json.dumps(runs, indent=1))
