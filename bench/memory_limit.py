"""Does MLX's memory limit, or a smaller chunk, lower the LM head's peak, and at what speed? MLX's CPU evaluation queues
work ahead of the CPU and allocates each op's output when it queues it, so the fused head
(``chunked_head``) holds several chunks' vocabulary-sized arrays at once; past ``mx.set_memory_limit``
it waits for queued work to finish first. ``memory_limit_gb`` sets that limit
(``memory_fit.evaluation_limit``); a smaller chunk makes each queued output smaller. This prints the
head's gradient (forward and backward) on the Qwen2.5-0.5B bench shape (151,936 × 896 head, 1,024
positions): the fused head's chunk with no limit and with the limit a few hundred MB above its
inputs, and other chunk sizes with none, side by side, alternating, best time of ``--repeats``.

    .venv/bin/python bench/memory_limit.py [--positions 1024] [--repeats 3] [--chunks 220,165]
"""

from __future__ import annotations

import argparse
import time

from grpo_tui.protocol.blas import active_blas, reexec_if_needed

reexec_if_needed()  # an optimized BLAS for mlx[cpu] on Linux, before MLX is imported

import mlx.core as mx  # noqa: E402

from grpo_tui.worker.engine import chunked_head  # noqa: E402
from grpo_tui.worker.engine.accel import memory  # noqa: E402

MiB = 2**20


def _gradient(vocabulary: int, hidden: int, positions: int, chunks: list[int]):
    keys = mx.random.split(mx.random.key(0), 3)
    weight = mx.random.normal((vocabulary, hidden), key=keys[0]) * 0.02
    states = mx.random.normal((positions, hidden), key=keys[1])
    targets = mx.random.randint(0, vocabulary, (positions,), key=keys[2])
    mx.eval(weight, states, targets)
    runs = {}
    for chunk in chunks:
        head = chunked_head._function(chunk, 1.0, True, None, True)
        gradient = mx.grad(lambda w, h, head=head: mx.sum(head(h, (w,), targets)[0]), argnums=(0, 1))
        runs[chunk] = lambda gradient=gradient: gradient(weight, states)
    return runs


def _measure(run, limit_above: int | None) -> tuple[float, float]:
    """(peak MiB above the inputs, seconds) of one evaluation."""
    mx.synchronize()
    mx.reset_peak_memory()
    base = mx.get_active_memory()
    previous = mx.set_memory_limit(base + limit_above) if limit_above is not None else None
    try:
        t0 = time.perf_counter()
        mx.eval(run())
        seconds = time.perf_counter() - t0
    finally:
        if previous is not None:
            mx.set_memory_limit(previous)
    return (mx.get_peak_memory() - base) / MiB, seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--vocabulary", type=int, default=151_936)
    parser.add_argument("--hidden", type=int, default=896)
    parser.add_argument("--positions", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--limits-mb", default="700,300", help="limits above the inputs to try (MiB)")
    parser.add_argument("--chunks", default="220,165", help="other chunk sizes (positions) to try, no limit")
    args = parser.parse_args()
    memory.keep_freed_memory()  # as the worker does: no page faults in the timings
    fused = chunked_head.fused_chunk(args.vocabulary)
    others = [int(c) for c in args.chunks.split(",") if c and int(c) != fused]
    runs = _gradient(args.vocabulary, args.hidden, args.positions, [fused] + others)
    for run in runs.values():
        mx.eval(run())  # compiled kernels built before the measurement
    settings = [(fused, None)] + [(fused, int(x) * MiB) for x in args.limits_mb.split(",") if x]
    settings += [(chunk, None) for chunk in others]
    results: dict[tuple, list[tuple[float, float]]] = {s: [] for s in settings}
    for _ in range(args.repeats):
        for chunk, limit in settings:
            results[(chunk, limit)].append(_measure(runs[chunk], limit))
    head_mb = args.vocabulary * args.hidden * 4 / MiB
    print(f"LM head gradient: {args.vocabulary} × {args.hidden} head ({head_mb:.0f} MiB, its gradient as much), "
          f"{args.positions} positions; the fused head's chunk {fused}; BLAS: {active_blas()}")
    print(f"{'chunk':>6}  {'MLX memory limit':<22}{'peak above inputs':>18}{'best s':>9}{'time vs first':>15}")
    first = min(t for _, t in results[settings[0]])
    for chunk, limit in settings:
        peak = max(p for p, _ in results[(chunk, limit)])
        best = min(t for _, t in results[(chunk, limit)])
        label = "none" if limit is None else f"inputs + {limit // MiB} MiB"
        print(f"{chunk:>6}  {label:<22}{peak:>14.0f} MiB{best:>9.2f}{best / first:>14.2f}×")


if __name__ == "__main__":
    main()
