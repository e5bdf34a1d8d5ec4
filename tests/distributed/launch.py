"""Helpers of the multi-rank tests: run a script under ``mlx.launch`` with local ring ranks."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from grpo_tui.worker.ranks import launch_command, launcher_failure

ROOT = Path(__file__).resolve().parents[2]


def run_ranks(n: int, *args: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    """``mlx.launch -n n --backend ring python args...``; raises with both outputs on failure."""
    command = launch_command([sys.executable, *args], ranks=n, backend="ring")
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    if done.returncode != 0 or launcher_failure(done.stderr):
        raise AssertionError(f"exit {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return done
