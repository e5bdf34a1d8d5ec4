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


def step_rows(spec: dict[str, Any], step: int) -> list[dict[str, str]]:
    """The prompt rows of the 1-based ``step`` (every system takes the rows in this order)."""
    b = spec["batch_size"]
    return spec["rows"][(step - 1) * b : step * b]


def max_rss_mb() -> float:
    """Peak resident memory of this process so far (Linux reports KiB)."""
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


def exact_answer(completion: str, answer: str) -> float:
    """The reward every system uses: 1 when ``<answer>N</answer>`` holds the right number."""
    start, end = completion.find("<answer>"), completion.find("</answer>")
    if start < 0 or end < start:
        return 0.0
    return 1.0 if completion[start + len("<answer>") : end].strip() == str(answer).strip() else 0.0
