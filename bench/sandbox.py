"""The sandbox's cost per call: ``grpo_tui.sandbox.call`` of a small tool against calling it in the
worker (``timed_calls.call``, the unsandboxed path), and ``run_python`` of a one-line program.

    nice -n 10 python bench/sandbox.py [--calls 50]

Prints, for each path, the median and the 90th percentile wall time of one call in milliseconds
(the sandboxed call's time is a Python start-up, the tool file's import and the limits), and the
containment this platform allowed.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Callable

from grpo_tui.sandbox import call, run_python
from grpo_tui.worker.engine.scoring import timed_calls

TOOL = 'def add(a: int, b: int) -> int:\n    """Add."""\n    return a + b\n'


def timed(fn: Callable[[], object], calls: int) -> tuple[float, float]:
    seconds = []
    for _ in range(calls):
        began = time.perf_counter()
        fn()
        seconds.append(time.perf_counter() - began)
    seconds.sort()
    return statistics.median(seconds) * 1000, seconds[min(len(seconds) - 1, int(0.9 * len(seconds)))] * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=50)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        tool = Path(folder) / "tools.py"
        tool.write_text(TOOL)
        namespace: dict[str, object] = {}
        exec(TOOL, namespace)
        add = namespace["add"]
        assert callable(add)
        first = call(f"{tool}:add", {"a": 1, "b": 2})
        assert first.ok and first.value == 3, first
        rows = {
            "in the worker (timed_calls.call)": timed(lambda: timed_calls.call(add, {"a": 1, "b": 2}, 10.0, "add"), args.calls),
            "sandbox.call (a tool file)": timed(lambda: call(f"{tool}:add", {"a": 1, "b": 2}), args.calls),
            "sandbox.run_python('pass')": timed(lambda: run_python("pass"), args.calls),
        }
    print(f"containment here: {', '.join(first.contained) or 'rlimits only'}; {args.calls} calls each")
    for name, (median, p90) in rows.items():
        print(f"{name:36s} median {median:8.2f} ms   p90 {p90:8.2f} ms")


if __name__ == "__main__":
    main()
