"""Dashboard under load: key-press latency and memory while a fake worker streams frames.

    python bench/tui_load.py [--seconds 60] [--fps 50] [--completion-chars 4000] [--keys 21314515]

The fake worker (tests/helpers/fake_worker.py) sends steps and samples with long completions at
``--fps`` frames per second; the app runs headless (full layout and rendering, no terminal). Every
quarter second a tab key (1-5) is posted as the terminal driver would and timed until its
action has run (``--keys 5`` keeps the Charts tab on screen throughout). Resident memory is sampled
after a warm-up and at the end. Targets: p99 key latency < 50 ms, dashboard CPU < 50 % of a core,
memory flat.
This is a benchmark that prints figures, not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

from textual import events

from grpo_tui.protocol.config import parse_config
from grpo_tui.tui.app import GrpoApp
from grpo_tui.tui.launcher import end_started
from grpo_tui.tui.run_messages import WorkerEvent, WorkerFrames

ROOT = Path(__file__).resolve().parent.parent
FAKE = ROOT / "tests" / "helpers" / "fake_worker.py"
CONFIG = """
[model]
path = "m"
[data]
path = "d.jsonl"
[[rewards]]
name = "accuracy"
[checkpoint]
output_dir = "{out}"
"""


def rss_mb() -> float:
    gc.collect()  # count what is retained, not garbage waiting for the next full collection
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def run(args: argparse.Namespace) -> None:
    out = Path(tempfile.mkdtemp(prefix="tui-load-"))
    config = parse_config(CONFIG.format(out=out), base_dir=out, check_paths=False)
    argv = [sys.executable, str(FAKE), "--output-dir", str(out), "--steps", "1000000", "--fps", str(args.fps),
            "--samples", "8", "--completion-chars", str(args.completion_chars)]
    app = GrpoApp(str(out / "config.toml"), config, worker_argv=argv)
    frames = 0
    latencies: list[float] = []
    slow: list[tuple[float, str, float]] = []
    async with app.run_test(size=(160, 48)) as pilot:
        post = app.run_link.connection._post  # type: ignore[union-attr]

        def counting(message: object) -> object:  # count frames as they arrive
            nonlocal frames
            if isinstance(message, WorkerFrames):
                frames += sum(isinstance(item, WorkerEvent) for item in message.items)
            return post(message)  # type: ignore[arg-type]

        app.run_link.connection._post = counting  # type: ignore[union-attr]
        handled: list[float] = []
        show_tab = app.dashboard.action_show_tab

        def timed_show_tab(tab: str) -> None:  # the key's action runs: the press is handled
            show_tab(tab)
            handled.append(time.perf_counter())

        app.dashboard.action_show_tab = timed_show_tab  # type: ignore[method-assign]
        start = time.perf_counter()
        warm_rss = None
        keys = tuple(args.keys)
        i = 0
        cpu0 = time.process_time()
        while (now := time.perf_counter()) - start < args.seconds:
            if warm_rss is None and now - start >= args.warmup:
                warm_rss, warm_at = rss_mb(), now - start
            key = keys[i % len(keys)]
            handled.clear()
            t0 = time.perf_counter()
            # a key as the terminal driver delivers it (Pilot.press would also wait for animations)
            app.post_message(events.Key(key, key))
            while not handled:
                await asyncio.sleep(0.001)
            latencies.append((handled[0] - t0) * 1000)
            slow.append((latencies[-1], key, round(t0 - start, 1)))
            i += 1
            await asyncio.sleep(0.25)
        elapsed = time.perf_counter() - start
        cpu = time.process_time() - cpu0
        end_rss = rss_mb()
        step = app.state.step
        app.run_link.quitting = True  # the worker's exit is not a crash to restart
        await app.run_link.connection.close()  # type: ignore[union-attr]
        end_started()  # the supervisor and its fake worker
    print(f"tui_load: {elapsed:.0f} s, fake worker at {args.fps:g} frames/s "
          f"({args.completion_chars}-char completions, 8 samples per step), keys {args.keys}; "
          f"load {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"  frames received   {frames} ({frames / elapsed:.1f}/s), steps shown {step}")
    print(f"  key latency       p50 {statistics.median(latencies):.1f} ms · p99 {pct(latencies, 0.99):.1f} ms · "
          f"max {max(latencies):.1f} ms over {len(latencies)} presses (target p99 < 50 ms)")
    print(f"  memory (RSS)      {warm_rss:.1f} MB at {warm_at:.0f} s → {end_rss:.1f} MB at {elapsed:.0f} s "
          f"({end_rss - warm_rss:+.1f} MB; target flat)")
    print("  slowest presses   " + ", ".join(f"{ms:.0f} ms ({key!r} at {at:g} s)" for ms, key, at in sorted(slow)[-5:]))
    print(f"  dashboard CPU     {cpu / elapsed * 100:.0f}% of one core")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seconds", type=float, default=60.0)
    p.add_argument("--fps", type=float, default=50.0)
    p.add_argument("--completion-chars", type=int, default=4000)
    p.add_argument("--warmup", type=float, default=10.0)
    p.add_argument("--keys", default="21314515",
                   help="tab keys pressed in turn (default: every tab; 5: stay on the Charts tab)")
    try:
        asyncio.run(run(p.parse_args()))
    finally:
        from grpo_tui.tui.launcher import end_started

        end_started()  # the fake run outlives the dashboard: end it


if __name__ == "__main__":
    main()
