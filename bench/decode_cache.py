"""The rollout's decode step with each prompt's KV cache shared by its rows vs repeated per row.

    .venv/bin/python bench/decode_cache.py                     # 0.6B shape, 8 rows, prompts of 16 / 240 / 1,000 tokens
    .venv/bin/python bench/decode_cache.py --prompts 240 --rounds 3

The compiled decode step (``accel.fastgen.DecodeStep``) of the worker's patched model with one
prompt × ``--rows`` completions, an argmax draw. "shared" is ``fastgen.SharedPromptCache`` (what
the x86 attention runs: the prompt's keys and values once, each row's completion slots after them);
"repeated" is the layout MLX's own attention keeps (the prompt's cache copied to every row). The
two alternate in one process, ``--rounds`` times; each figure is the median of ``--steps`` steps.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from grpo_tui.common.blas import active_blas, reexec_if_needed

reexec_if_needed()  # an optimized BLAS for mlx[cpu] on Linux, before MLX is imported

import mlx.core as mx  # noqa: E402
from mlx_lm.utils import load  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import shapes  # noqa: E402

from grpo_tui.worker.engine.accel import fastgen, patches  # noqa: E402


def step_ms(model, prompt_tokens: int, rows: int, steps: int, shared: bool) -> float:
    """Median milliseconds of a decode step after a ``prompt_tokens`` prompt, in one layout."""
    original = patches.is_patched
    fastgen.patches.is_patched = original if shared else (lambda m: False)  # type: ignore[assignment]
    try:
        prompt = [[(i * 7919) % 150_000 + 10 for i in range(prompt_tokens)]]
        cache = fastgen.prefill(model, prompt, rows, 64)
        mx.eval(cache.logits, cache.kv, cache.prompt)
        kv, decode = cache.kv, fastgen.DecodeStep(model)
        token = mx.argmax(cache.logits, axis=-1)
        times = []
        for t in range(steps):
            start = time.perf_counter()
            logits, *kv = decode(token[:, None], mx.array(cache.width + t), cache.left_pad, *kv,
                                 prompt=cache.prompt, width=cache.width)
            token = mx.argmax(logits, axis=-1)
            mx.eval(token)
            times.append(time.perf_counter() - start)
        return sorted(times)[steps // 2] * 1000
    finally:
        fastgen.patches.is_patched = original  # type: ignore[assignment]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--layers", type=int, default=None, help="depth of the 0.6B shape (default: 28)")
    parser.add_argument("--rows", type=int, default=8)
    parser.add_argument("--prompts", default="16,240,1000", help="comma-separated prompt lengths")
    parser.add_argument("--steps", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    model, _ = load(str(shapes.qwen3_06b_model(args.layers)))
    patches.row_major_weight_grads(model)
    if not patches.patch_model(model):
        raise SystemExit("the x86 attention does not apply to this model")
    print(f"BLAS: {active_blas()} · 0.6B shape · {args.rows} rows · median of {args.steps} decode steps")
    print(f"{'prompt':>7} {'round':>5} {'repeated ms':>12} {'shared ms':>10} {'faster by':>10}")
    for tokens in (int(p) for p in args.prompts.split(",")):
        for round_ in range(1, args.rounds + 1):
            repeated = step_ms(model, tokens, args.rows, args.steps, shared=False)
            shared = step_ms(model, tokens, args.rows, args.steps, shared=True)
            print(f"{tokens:>7} {round_:>5} {repeated:>12.1f} {shared:>10.1f} {repeated / shared:>9.2f}×", flush=True)


if __name__ == "__main__":
    main()
