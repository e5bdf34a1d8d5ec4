"""Shared by the runner scripts (standard library only: each runs in its own virtualenv).

A runner is started as ``python RUNNER SPEC.json``. The spec holds the identical work every system
does (model folder, prompt rows, batch/group size, completion length, learning rate, steps) and the
path where the runner writes its result JSON: one entry per step (warm-up steps included, the
orchestrator drops them) plus whatever the system can tell about memory and tokens.
"""

from __future__ import annotations

import json
import resource
import sys
import time
from typing import Any


def load_spec() -> dict[str, Any]:
    with open(sys.argv[1], encoding="utf-8") as f:
        return json.load(f)


def rss_mb() -> float:
    """Resident memory of this process now, MB (``VmRSS``; 0 where /proc is missing)."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def max_rss_mb() -> float:
    """Peak resident memory of this process so far, MB: the kernel's high-water mark (``VmHWM``,
    what a user's memory monitor peaked at), else ``ru_maxrss`` (Linux reports KiB)."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def write_result(spec: dict[str, Any], result: dict[str, Any]) -> None:
    result.setdefault("max_rss_mb", max_rss_mb())
    with open(spec["out"], "w", encoding="utf-8") as f:
        json.dump(result, f, indent=1)


class StepClock:
    """Wall time and this process's CPU time (all its threads) between consecutive marks; the
    first mark ends step 1. CPU time barely moves when other programs load the machine, so it is
    the steadier figure on a shared computer; wall time is what a user waits."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.wall, self.cpu = time.perf_counter(), time.process_time()

    def mark(self) -> tuple[float, float]:
        wall, cpu = time.perf_counter(), time.process_time()
        spent = (wall - self.wall, cpu - self.cpu)
        self.wall, self.cpu = wall, cpu
        return spent


def bench_reward(completion: str, answer: str) -> float:
    """The reward every system uses: 1 when ``<answer>N</answer>`` holds the right number, else a
    deterministic value in [0, 1) from the text. A random-weight model is never right, and with
    all-equal rewards the advantages (and so the gradients) would be zero; this keeps the work real.
    """
    start, end = completion.find("<answer>"), completion.find("</answer>")
    if 0 <= start < end and completion[start + len("<answer>") : end].strip() == str(answer).strip():
        return 1.0
    return (sum(map(ord, completion)) % 97) / 97


def grpo_tui_reward(prompts: list, completions: list[str], answer: list[str], **columns) -> list[float]:
    """``bench_reward`` with grpo-tui's custom reward signature."""
    return [bench_reward(c, a) for c, a in zip(completions, answer)]


class PhaseTimer:
    """Wraps a function and adds its wall time to ``total`` (to split a step into phases)."""

    def __init__(self, fn):
        self.fn, self.total = fn, 0.0

    def __call__(self, *args, **kwargs):
        start = time.perf_counter()
        try:
            return self.fn(*args, **kwargs)
        finally:
            self.total += time.perf_counter() - start

    def take(self) -> float:
        spent, self.total = self.total, 0.0
        return spent
