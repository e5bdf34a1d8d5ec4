"""``grpo-tui check CONFIG --probe [N]``: the probe runs in a worker-side child process (MLX), this
prints what it measured and the verdict (docs/doctor.md, "Before the run"). Exit 0 when the run
looks trainable, 10 when the verdict names a change to make first, 2 when the probe cannot run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

from grpo_tui.common.blas import child_env
from grpo_tui.common.doctor import probe_verdict
from grpo_tui.protocol.config import Config

NEEDS_A_CHANGE = 10


def _machine_gb() -> float:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1e9
    except (ValueError, OSError, AttributeError):
        return 0.0


def run_probe(config_path: str, prompts: int, overrides: list[str], config: Config) -> int:
    done = subprocess.run([sys.executable, "-m", "grpo_tui.worker.engine.probe", config_path, str(max(1, prompts)), *overrides],
                          capture_output=True, text=True, env=child_env(config.runtime.blas))  # the worker's BLAS
    if done.returncode != 0:
        said = [line for line in done.stderr.strip().splitlines() if line.strip()]
        print(f"grpo-tui: the probe could not run: {said[-1] if said else f'exit {done.returncode}'}", file=sys.stderr)
        return 2
    try:  # its last line is the figures; a reward or tool that ended the process (os._exit) leaves none
        found: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
        if not isinstance(found, dict):
            raise ValueError(found)
    except (IndexError, ValueError):
        print("grpo-tui: the probe could not run: its process ended without its figures (exit 0; a reward or tool "
              "that calls os._exit or sys.exit ends the process it runs in); make it return a value instead",
              file=sys.stderr)
        return 2
    machine = _machine_gb()
    sentence = probe_verdict(found, config.training.memory_limit_gb, machine)
    by = "the accuracy reward" if found["by_accuracy"] else "the run's best reward"
    budget = f"{config.training.memory_limit_gb:g} GB memory_limit_gb" if config.training.memory_limit_gb else f"{machine:.0f} GB here"
    print(f"# probe: {found['prompts']} prompts × {found['group_size']} completions, then steps of the run's batch (the median of three, after a first)")
    print(f"#   pass rate ({by}): {_pct(found['pass_0'])} never, {_pct(found['pass_between'])} in between, "
          f"{_pct(found['pass_100'])} always")
    print(f"#   groups without a learning signal: {_pct(found['flat_groups'])}; cut at max_completion_length = "
          f"{found['max_completion_length']}: {_pct(found['truncated'])}")
    print(f"#   a step: {found['step_seconds']:.2f} s, peak {found['peak_memory_gb']:.2f} GB (of {budget}); "
          f"the run: about {found['run_seconds'] / 60:.1f} min for {found['total_steps']} steps")
    print(f"# verdict: {sentence}")
    return 0 if sentence.startswith("looks trainable") else NEEDS_A_CHANGE


def _pct(x: float) -> str:
    return f"{100 * x:.0f} %"
