"""Does MLX's memory limit lower the LM head's peak, and at what speed? MLX's CPU evaluation queues
work ahead of the CPU and allocates each op's output when it queues it, so the fused head
(``chunked_head``) holds several chunks' vocabulary-sized arrays at once; past ``mx.set_memory_limit``
it waits for queued work to finish first. ``memory_limit_gb`` sets that limit
(``memory_fit.evaluation_limit``). This prints the head's gradient (forward and backward) on the
Qwen2.5-0.5B bench shape (151,936 × 896 head, 1,024 positions) with no limit and with the limit a
few hundred MB above its inputs, side by side, alternating, best time of ``--repeats``.

    .venv/bin/python bench/memory_limit.py [--positions 1024] [--repeats 3]
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


def _gradient(vocabulary: int, hidden: int, positions: int):
    keys = mx.random.split(mx.random.key(0), 3)
    weight = mx.random.normal((vocabulary, hidden), key=keys[0]) * 0.02
    states = mx.random.normal((positions, hidden), key=keys[1])
    targets = mx.random.randint(0, vocabulary, (positions,), key=keys[2])
    mx.eval(weight, states, targets)
    head = chunked_head._function(chunked_head.fused_chunk(vocabulary), 1.0, True, None, True)
    gradient = mx.grad(lambda w, h: mx.sum(head(h, (w,), targets)[0]), argnums=(0, 1))
    return lambda: gradient(weight, states)


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
    args = parser.parse_args()
    memory.keep_freed_memory()  # as the worker does: no page faults in the timings
    run = _gradient(args.vocabulary, args.hidden, args.positions)
    mx.eval(run())  # compiled kernels built before the measurement
    settings: list[int | None] = [None] + [int(x) * MiB for x in args.limits_mb.split(",")]
    results: dict[int | None, list[tuple[float, float]]] = {s: [] for s in settings}
    for _ in range(args.repeats):
        for setting in settings:
            results[setting].append(_measure(run, setting))
    head_mb = args.vocabulary * args.hidden * 4 / MiB
    print(f"LM head gradient: {args.vocabulary} × {args.hidden} head ({head_mb:.0f} MiB, its gradient as much), "
          f"{args.positions} positions, chunks of {chunked_head.fused_chunk(args.vocabulary)}; BLAS: {active_blas()}")
    print(f"{'MLX memory limit':<28}{'peak above inputs':>18}{'best s':>9}{'time vs none':>14}")
    none_time = min(s for _, s in results[None])
    for setting in settings:
        peak = max(p for p, _ in results[setting])
        best = min(s for _, s in results[setting])
        label = "none" if setting is None else f"inputs + {setting // MiB} MiB"
        print(f"{label:<28}{peak:>14.0f} MiB{best:>9.2f}{best / none_time:>13.2f}×")


if __name__ == "__main__":
    main()
