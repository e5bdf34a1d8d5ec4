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
for each shape of ``ESTIMATE_SHAPES`` (the step bench's demo, real-vocab-tiny, SmolLM2-135M and
Qwen3-0.6B shapes, the issue's ~100M Qwen3 with the 151,936 vocabulary, a prompt-heavy step and a
LoRA step on it) it runs one real step of the default plan and one with every memory switch
(``bench/peers/grpo_tui_step.py``, a process each, one at a time) and prints the measured peaks (MLX,
resident) beside the estimate of the resident peak, their ratio, and whether every ratio is within
±15 %. A shape whose estimate is above 8 GB in either plan is skipped, with the reason. The
steps are saved in ``.bench/memory-estimate.json``; ``--saved`` checks the estimate against them
without running anything:

    nice .venv/bin/python bench/memory_limit.py --estimate [--only demo,qwen3-100m] [--saved]
"""

from __future__ import annotations

import argparse
import time

from grpo_tui.common.blas import active_blas, reexec_if_needed

reexec_if_needed()  # an optimized BLAS for mlx[cpu] on Linux, before MLX is imported

import mlx.core as mx  # noqa: E402

from grpo_tui.worker.engine.learning import chunked_head  # noqa: E402
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


# The shapes --estimate checks: (name, model, work, LoRA). Models: a folder of ``bench/shapes.py`` by
# its step_vs_peers name, or (folder name, Qwen3 dimensions, layers) of a random Qwen3. Work: prompts,
# group, completion tokens, filler tokens before each prompt (step_vs_peers.SHAPES, or the issue's).
QWEN3_100M = {"hidden_size": 512, "num_hidden_layers": 8, "num_attention_heads": 8, "num_key_value_heads": 4,
              "head_dim": 64, "intermediate_size": 1536, "vocab_size": 151_936}


def _work(batch: int, group: int, completion: int, prompt_tokens: int = 0) -> dict:
    return {"batch_size": batch, "group_size": group, "max_completion_length": completion, "prompt_tokens": prompt_tokens}


ESTIMATE_SHAPES: list[tuple[str, object, dict, dict | None]] = [
    ("demo", "demo", _work(8, 8, 24), None),
    ("real-vocab-tiny", "real-vocab-tiny", _work(8, 8, 32), None),
    ("qwen3-100m", ("qwen3-100m", QWEN3_100M, None), _work(1, 8, 128), None),
    ("prompt-heavy", ("qwen3-100m", QWEN3_100M, None), _work(1, 8, 64, prompt_tokens=256), None),
    ("smollm2-135m", "smollm2-135m", _work(4, 8, 24), None),
    ("qwen3-0.6b-4l", ("qwen3-0.6b-shape", "0.6b", 4), _work(2, 4, 32), None),
    ("qwen3-0.6b", ("qwen3-0.6b-shape", "0.6b", None), _work(2, 4, 32), None),
    ("qwen3-100m-lora", ("qwen3-100m", QWEN3_100M, None), _work(1, 8, 64), {"rank": 8, "layers": -1}),
]
ALL_SWITCHES = {"gradient_checkpointing": True, "vocab_chunk_size": 64, "logprob_batch_size": 1}
# "default": the step a budget runs when it needs no switch. A roomy memory_limit_gb, since a budget
# changes the plan of a model up to 50M parameters (the loss eager, MLX's evaluation order narrower).
MODES = (("default", {"memory_limit_gb": 64.0}), ("switches", ALL_SWITCHES))
SKIP_ABOVE_GB = 8.0  # a shared machine: a shape whose estimate is above this is not run
TOLERANCE = 0.15
SAVED = "memory-estimate.json"  # under .bench/: every measured step, for --saved


def _folder(model) -> Path:
    import shapes
    from step_vs_peers import model_folder

    if isinstance(model, str):
        return model_folder(model, None)
    base, dims, layers = model
    dims = shapes.QWEN3_SHAPES[dims][1] if isinstance(dims, str) else dims
    return shapes.shaped_model(base, dims, layers)


def _planned_shape(model, work: dict, lora: dict | None):
    """A random Qwen3's step shape from its dimensions, before its folder is built (to skip it)."""
    import shapes

    from grpo_tui.worker.engine.models import memory_fit

    if isinstance(model, str):
        return None
    _, dims, layers = model
    dims = dict(shapes.QWEN3_SHAPES[dims][1] if isinstance(dims, str) else dims)
    dims["num_hidden_layers"] = layers or dims["num_hidden_layers"]
    parameters = shapes.param_count(dims)
    trainable = parameters if lora is None else parameters // 100  # LoRA: a sliver; only the frozen part matters here
    return memory_fit.StepShape(
        parameters=parameters, trainable=trainable, bytes_per_value=4, vocabulary=dims["vocab_size"],
        hidden=dims["hidden_size"], intermediate=dims["intermediate_size"], heads=dims["num_attention_heads"],
        layers=dims["num_hidden_layers"], rows=work["batch_size"] * work["group_size"], group=work["group_size"],
        prompt_tokens=work.get("prompt_tokens", 0) + 30, completion_tokens=work["max_completion_length"],
        reference=False, head="fused", kv_heads=dims["num_key_value_heads"], head_dim=dims["head_dim"])


def _estimate(shape, switches: dict) -> float:
    from grpo_tui.worker.engine.models import memory_fit

    return memory_fit.estimate(shape, bool(switches.get("gradient_checkpointing")),
                               int(switches.get("vocab_chunk_size", 0)), int(switches.get("logprob_batch_size", 0)))


def check_estimate(only: list[str], saved_only: bool) -> None:
    """Measured step peaks against ``memory_fit``'s estimate, on ``ESTIMATE_SHAPES``: each step is
    run here (``--saved``: read from the last runs' file instead, to check a new estimate)."""
    import json
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from step_vs_peers import BENCH, MEMORY_PROBE, run_system, summarise

    from grpo_tui.worker.engine.models import memory_fit

    data = Path(__file__).resolve().parent.parent / "examples" / "data" / "arith.jsonl"
    (BENCH / "logs").mkdir(parents=True, exist_ok=True)
    saved_path = BENCH / SAVED
    saved = json.loads(saved_path.read_text()) if saved_path.exists() else {}
    print(f"{'shape':<17}{'plan':<10}{'MLX peak':>10}{'resident':>10}{'estimate':>10}{'est/res':>9}  (GB; resident: "
          "the process's peak, what memory_limit_gb means)")
    ratios = []
    for name, model, work, lora in ESTIMATE_SHAPES:
        if only and name not in only:
            continue
        planned = _planned_shape(model, work, lora)
        frugal = min(_estimate(planned, switches) for _, switches in MODES) / 1e9 if planned else 0.0
        if frugal > SKIP_ABOVE_GB:
            print(f"{name:<17}skipped: its step is estimated at {frugal:.1f} GB or more (either plan), above the "
                  f"{SKIP_ABOVE_GB:g} GB this shared machine allows a bench")
            continue
        shape = None
        for mode, switches in MODES:
            key = f"{name}/{mode}"
            if not saved_only:
                run = {**MEMORY_PROBE, **work, "name": f"estimate-{name}-{mode}", "warmup": 0, "steps": 1}
                result = run_system("grpo-tui", run, _folder(model), data, BENCH / "logs", 3600, training=switches,
                                    **({"lora": lora} if lora else {}))
                if "error" in result:
                    print(f"{name:<17}{mode:<10} {result['error']}", flush=True)
                    continue
                saved = json.loads(saved_path.read_text()) if saved_path.exists() else {}  # another run's too
                saved[key] = result
                partial = saved_path.with_suffix(".partial")
                partial.write_text(json.dumps(saved, indent=1))
                partial.replace(saved_path)
            result = saved.get(key)
            if result is None:
                print(f"{name:<17}{mode:<10} not measured yet (run without --saved)")
                continue
            peak = max(step["peak_memory_mb"] for step in result["steps"]) * 2**20 / 1e9
            rss = summarise(result, 0)["max_rss_mb"] * 2**20 / 1e9
            shape = memory_fit.StepShape(**result["fit_shape"])
            est = _estimate(shape, switches) / 1e9
            ratios.append(est / rss)
            print(f"{name:<17}{mode:<10}{peak:>10.2f}{rss:>10.2f}{est:>10.2f}{est / rss:>9.2f}", flush=True)
        if shape is not None:
            print(f"{name:<17}smallest budget the estimate accepts: {memory_fit.smallest_budget(shape):.1f} GB")
    within = bool(ratios) and all(abs(r - 1) <= TOLERANCE for r in ratios)
    print(f"all within ±{TOLERANCE:.0%}: {'yes' if within else 'no'} ({len(ratios)} steps)".replace("±15%", "±15 %"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--vocabulary", type=int, default=151_936)
    parser.add_argument("--hidden", type=int, default=896)
    parser.add_argument("--positions", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--limits-mb", default="700,300", help="limits above the inputs to try (MiB)")
    parser.add_argument("--chunks", default="220,165", help="other chunk sizes (positions) to try, no limit")
    parser.add_argument("--estimate", action="store_true", help="memory_limit_gb's estimate against whole steps")
    parser.add_argument("--only", default="", help="--estimate: these shapes only (comma-separated names)")
    parser.add_argument("--saved", action="store_true",
                        help=f"--estimate: the steps measured last (.bench/{SAVED}) against the estimate, none run")
    args = parser.parse_args()
    if args.estimate:
        check_estimate([n for n in args.only.split(",") if n], args.saved)
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
