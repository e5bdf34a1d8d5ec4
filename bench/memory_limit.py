"""Does MLX's memory limit, or a smaller chunk, lower the LM head's peak, and at what speed? MLX's CPU evaluation queues
work ahead of the CPU and allocates each op's output when it queues it, so the fused head
(``chunked_head``) holds several chunks' vocabulary-sized arrays at once; past ``mx.set_memory_limit``
it waits for queued work to finish first. ``memory_limit_gb`` sets that limit
(``memory_fit.evaluation_limit``); a smaller chunk makes each queued output smaller. This prints the
head's gradient (forward and backward) on the Qwen2.5-0.5B bench shape (151,936 × 896 head, 1,024
positions): the fused head's chunk with no limit and with the limit a few hundred MB above its
inputs, and other chunk sizes with none, side by side, alternating, best time of ``--repeats``.

    .venv/bin/python bench/memory_limit.py [--positions 1024] [--repeats 3] [--chunks 220,165]

``--estimate`` instead checks ``memory_limit_gb``'s estimate (``memory_fit``) against whole steps:
for each bench shape (``ESTIMATE_SHAPES``: a ~100M-parameter Qwen3 with the 151,936 vocabulary,
1 prompt × G = 8 × 128 tokens, full fine-tuning) it runs one real step of the default plan and one
with every memory switch (``bench/peers/grpo_tui_step.py``, a process each) and prints the measured
peaks (MLX, resident) beside the estimate, and the smallest budget the estimate accepts:

    nice .venv/bin/python bench/memory_limit.py --estimate
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


# (name, dimensions, completion tokens): the shapes --estimate checks.
ESTIMATE_SHAPES = [
    ("qwen3-100m", {"hidden_size": 512, "num_hidden_layers": 8, "num_attention_heads": 8, "num_key_value_heads": 4,
                    "head_dim": 64, "intermediate_size": 1536, "vocab_size": 151_936}, 128),
]
ALL_SWITCHES = {"gradient_checkpointing": True, "vocab_chunk_size": 64, "logprob_batch_size": 1}


def check_estimate() -> None:
    """Measured step peaks against ``memory_fit``'s estimate, on ``ESTIMATE_SHAPES``."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import shapes
    from step_vs_peers import BENCH, MEMORY_PROBE, run_system, summarise

    from grpo_tui.worker.engine import memory_fit

    data = Path(__file__).resolve().parent.parent / "examples" / "data" / "arith.jsonl"
    (BENCH / "logs").mkdir(parents=True, exist_ok=True)
    print(f"{'shape':<12}{'mode':<10}{'peak MLX GB':>12}{'peak RSS GB':>12}{'estimate GB':>12}{'vs RSS':>8}")
    for name, dims, completion in ESTIMATE_SHAPES:
        model = shapes.shaped_model(name, dims)
        for mode, switches in (("default", {}), ("switches", ALL_SWITCHES)):
            work = {**MEMORY_PROBE, "max_completion_length": completion, "name": f"estimate-{name}-{mode}",
                    "warmup": 0, "steps": 1}
            result = run_system("grpo-tui", work, model, data, BENCH / "logs", 1800, training=switches)
            if "error" in result:
                print(f"{name:<12}{mode:<10} {result['error']}")
                continue
            peak = max(step["peak_memory_mb"] for step in result["steps"]) * 2**20 / 1e9
            rss = summarise(result, 0)["max_rss_mb"] * 2**20 / 1e9
            shape = memory_fit.StepShape(
                parameters=shapes.param_count(dims), trainable=shapes.param_count(dims), bytes_per_value=4,
                vocabulary=dims["vocab_size"], hidden=dims["hidden_size"], intermediate=dims["intermediate_size"],
                heads=dims["num_attention_heads"], layers=dims["num_hidden_layers"], rows=MEMORY_PROBE["group_size"],
                group=MEMORY_PROBE["group_size"], prompt_tokens=result.get("prompt_tokens", 32),
                completion_tokens=completion, reference=False, fused_head=True,
            )
            est = memory_fit.estimate(shape, bool(switches.get("gradient_checkpointing")),
                                      int(switches.get("vocab_chunk_size", 0)), int(switches.get("logprob_batch_size", 0)))
            print(f"{name:<12}{mode:<10}{peak:>12.2f}{rss:>12.2f}{est / 1e9:>12.2f}{est / 1e9 / rss - 1:>+8.0%}", flush=True)
        print(f"{name:<12}smallest budget the estimate accepts: {memory_fit.smallest_budget(shape):.1f} GB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--vocabulary", type=int, default=151_936)
    parser.add_argument("--hidden", type=int, default=896)
    parser.add_argument("--positions", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--limits-mb", default="700,300", help="limits above the inputs to try (MiB)")
    parser.add_argument("--chunks", default="220,165", help="other chunk sizes (positions) to try, no limit")
    parser.add_argument("--estimate", action="store_true", help="memory_limit_gb's estimate against whole steps")
    args = parser.parse_args()
    if args.estimate:
        check_estimate()
        return
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
