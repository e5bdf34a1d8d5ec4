"""Tokens and seconds the repetition stop saves on a model that loops.

    python bench/repetition_stop.py [--tokens 256] [--prompts 8] [--group 4] [--ngram 4] [--count 8]

A random-weight tiny Qwen3 (tests/helpers/tiny_model.py) falls into loops at a low temperature, as a
degenerate policy does. Each rollout path (the compiled loop and mlx-lm's BatchGenerator) runs the
same prompts with the rule off and on; the table prints generated tokens, seconds and finish
reasons. Nothing is trained or saved.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests.helpers: the tiny model, the stock plan

from grpo_tui.common.blas import reexec_if_needed  # noqa: E402

reexec_if_needed()

import mlx.core as mx  # noqa: E402
from mlx_lm import load  # noqa: E402

from grpo_tui.protocol.config import GenerationConfig  # noqa: E402
from grpo_tui.worker.engine.policy import rollout  # noqa: E402
from grpo_tui.worker.engine.accel import fastgen  # noqa: E402
from tests.helpers.plans import stock_plan  # noqa: E402
from tests.helpers.tiny_model import build_tiny_model  # noqa: E402


def run(model, tokenizer, prompts, group: int, gen: GenerationConfig) -> tuple[int, float, Counter]:
    mx.random.seed(0)
    t0 = time.perf_counter()
    out = rollout.generate(model, tokenizer, prompts, group, gen, logprobs=False, plan=stock_plan(model, gen))
    seconds = time.perf_counter() - t0
    return sum(len(c.token_ids) for c in out), seconds, Counter(c.finish_reason for c in out)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--tokens", type=int, default=256)
    p.add_argument("--prompts", type=int, default=8)
    p.add_argument("--group", type=int, default=4)
    p.add_argument("--ngram", type=int, default=4)
    p.add_argument("--count", type=int, default=8)
    p.add_argument("--temperature", type=float, default=0.3)
    args = p.parse_args()
    folder = build_tiny_model(Path(tempfile.mkdtemp()) / "tiny", hidden_size=64, layers=2)
    model, tokenizer = load(str(folder))
    prompts = [tokenizer.encode(f"{i} + {i * 7 % 10} =") for i in range(args.prompts)]
    off = GenerationConfig(max_completion_length=args.tokens, temperature=args.temperature)
    on = GenerationConfig(max_completion_length=args.tokens, temperature=args.temperature,
                          repetition_stop_ngram=args.ngram, repetition_stop_count=args.count)
    supports = fastgen.supports
    print(f"{args.prompts} prompts x {args.group}, max {args.tokens} tokens, temperature {args.temperature}, "
          f"rule: a {args.ngram}-gram {args.count} times")
    for path in ("compiled loop", "BatchGenerator"):
        fastgen.supports = supports if path == "compiled loop" else (lambda *a, **k: False)
        run(model, tokenizer, prompts[:1], 1, off)  # warm-up (compilation)
        base, with_rule = run(model, tokenizer, prompts, args.group, off), run(model, tokenizer, prompts, args.group, on)
        saved = 1 - with_rule[0] / base[0]
        print(f"{path:>14}: off {base[0]:6d} tokens {base[1]:6.2f} s {dict(base[2])} | "
              f"on {with_rule[0]:6d} tokens {with_rule[1]:6.2f} s {dict(with_rule[2])} | {saved:.0%} fewer tokens")
    fastgen.supports = supports


if __name__ == "__main__":
    main()
