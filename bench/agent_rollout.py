"""The whole-batch stall of agent rollouts in rounds, against continuous rows, in one run.

    python bench/agent_rollout.py [--latency-ms 100] [--prompts 8] [--group 8] [--tokens 128] [--repeats 3]
                                  [--model examples/runs/agent_calculator/final]

The agent demo's model (examples/models/tiny-agent, a 0.4M-parameter Qwen3 that calls its calculator
in part of its completions and guesses in the rest) rolls out the held-out prompts with the
calculator tool, which sleeps ``--latency-ms`` per call (a realistic tool: an HTTP call, a sandbox),
sampled with the trainer's keyed sampler at temperature 1. Three ways, alternated ``--repeats`` times:

- **rounds, calls one by one**: the design agent rollouts had before (rebuilt here from the public
  pieces): every row to the end of its turn, then the round's calls one after the other, then the
  rows that called from their whole context again;
- **rounds, a round's calls at once**: the same with the round's calls on threads, so only the round
  barrier is left;
- **continuous** (``engine.agent.generate``): a row's calls run on a thread while the others decode.

Then the rows-without-tools cost: the plain compiled rollout (``rollout.generate``, fastgen's loop)
against ``agent.generate`` with no call ever run, same prompts and keys (the same tokens), i.e.
``accel.rowgen``'s per-row step against fastgen's shared-position step. Prints the median wall
seconds, CPU seconds, model tokens per second and the ratios. Nothing is trained or saved.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples"))  # eval_arith.render_prompt
sys.path.insert(0, str(ROOT))  # tests.helpers.plans

from grpo_tui.common.blas import reexec_if_needed  # noqa: E402
from tests.helpers.plans import stock_plan  # noqa: E402

reexec_if_needed()

import msgspec  # noqa: E402
from mlx_lm import load  # noqa: E402

from grpo_tui.protocol.config import GenerationConfig  # noqa: E402
from grpo_tui.worker.engine.policy import agent, rollout, sampling  # noqa: E402
from grpo_tui.worker.engine.accel import fastgen  # noqa: E402
from grpo_tui.worker.engine.scoring.tool_schema import function_schema  # noqa: E402
from grpo_tui.worker.engine.scoring.tools import Tool  # noqa: E402
from eval_arith import render_prompt  # noqa: E402

LATENCY = [0.1]


def multiply(a: int, b: int) -> int:
    """Multiply two integers.

    Args:
        a: The first factor.
        b: The second factor.
    """
    time.sleep(LATENCY[0])
    return a * b


def rounds(model, tokenizer, prompts, n, gen, tools, keys, parallel: bool, decode, plan) -> list[rollout.Completion]:
    """The rounds design: each round generates every live row to the end of its turn; the round's
    calls run (one by one, or all at once); the rows that called go on in the next round."""
    by_name = {t.name: t for t in tools}
    contexts = [p for p in prompts for _ in range(n)]
    tokens: list[list[int]] = [[] for _ in contexts]
    mask: list[list[int]] = [[] for _ in contexts]
    calls = [0] * len(contexts)
    live = list(range(len(contexts)))
    with ThreadPoolExecutor(max_workers=len(contexts)) as pool:
        while live:
            budget = max(gen.max_completion_length - len(tokens[i]) for i in live)
            outs = rollout.generate(model, tokenizer, [contexts[i] + tokens[i] for i in live], 1,
                                    GenerationConfig(max_completion_length=budget, temperature=gen.temperature),
                                    logprobs=False, keys=[keys[i] for i in live], decode=decode, plan=plan)
            pending = []
            for i, out in zip(live, outs):
                ids = out.token_ids[: gen.max_completion_length - len(tokens[i])]
                tokens[i] += ids
                mask[i] += [1] * len(ids)
                found = agent.closed_calls(out.text) if out.finish_reason == "stop" and len(ids) == len(out.token_ids) else []
                if found and calls[i] + len(found) <= gen.max_tool_calls:
                    pending.append((i, found))
            results = (pool.map(lambda job: agent.run_calls(by_name, job[1]), pending) if parallel
                       else [agent.run_calls(by_name, found) for _, found in pending])
            live = []
            for (i, found), turns in zip(pending, results):
                glue = agent.tool_glue(tokenizer, turns, gen.enable_thinking, tokens[i][-1])
                if len(tokens[i]) + len(glue) < gen.max_completion_length:
                    tokens[i] += glue
                    mask[i] += [0] * len(glue)
                    calls[i] += len(found)
                    live.append(i)
    return [rollout.Completion(i // n, t, "", "", mask=m) for i, (t, m) in enumerate(zip(tokens, mask))]


def timed(fn) -> tuple[float, float, list[rollout.Completion]]:
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn()
    return time.perf_counter() - wall, time.process_time() - cpu, out


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--latency-ms", type=float, default=100.0)
    p.add_argument("--prompts", type=int, default=8)
    p.add_argument("--group", type=int, default=8)
    p.add_argument("--tokens", type=int, default=128)
    p.add_argument("--max-tool-calls", type=int, default=2)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--model", default=str(ROOT / "examples" / "models" / "tiny-agent"),
                   help="e.g. examples/runs/agent_calculator/final: the demo after GRPO, which calls in most rows")
    args = p.parse_args()
    LATENCY[0] = args.latency_ms / 1000
    model, tokenizer = load(args.model)
    rows = [json.loads(line) for line in (ROOT / "examples" / "data" / "mul_eval.jsonl").read_text().splitlines()]
    prompts = [render_prompt(tokenizer, r["prompt"]) for r in rows[: args.prompts]]
    gen = GenerationConfig(max_completion_length=args.tokens, temperature=1.0, max_tool_calls=args.max_tool_calls)
    no_calls = msgspec.structs.replace(gen, max_tool_calls=0)
    tools = [Tool("multiply", multiply, 10.0, function_schema(multiply))]
    n = args.group
    decode = fastgen.DecodeStep(model)  # one compiled step for every way, as the trainer keeps it
    plan = stock_plan(model, gen)  # the compiled loop with MLX's own kernels, for every way
    ways = {
        "rounds, calls one by one": lambda keys: rounds(model, tokenizer, prompts, n, gen, tools, keys, False, decode, plan),
        "rounds, a round's calls at once": lambda keys: rounds(model, tokenizer, prompts, n, gen, tools, keys, True,
                                                               decode, plan),
        "continuous": lambda keys: agent.generate(model, tokenizer, prompts, n, gen, tools, keys=keys, decode=decode, plan=plan),
        "plain compiled rollout (no tools)": lambda keys: rollout.generate(model, tokenizer, prompts, n, gen,
                                                                          logprobs=False, keys=keys, decode=decode, plan=plan),
        "continuous, no call run": lambda keys: agent.generate(model, tokenizer, prompts, n, no_calls, [], keys=keys,
                                                               decode=decode, plan=plan),
    }
    for way in ways.values():  # warm-up: compile every shape once
        way(sampling.step_keys(0, 0, list(range(len(prompts))), n))
    results: dict[str, list[tuple[float, float, int, int]]] = {name: [] for name in ways}
    for repeat in range(args.repeats):
        keys = sampling.step_keys(0, repeat + 1, list(range(len(prompts))), n)
        same: dict[str, list[list[int]]] = {}
        for name, way in ways.items():
            wall, cpu, out = timed(lambda: way(keys))
            same[name] = [c.token_ids for c in out]
            model_tokens = sum(c.model_tokens for c in out)
            tool_calls = sum(m == 0 and (k == 0 or c.mask[k - 1] == 1) for c in out if c.mask for k, m in enumerate(c.mask))
            results[name].append((wall, cpu, model_tokens, tool_calls))
        assert same["plain compiled rollout (no tools)"] == same["continuous, no call run"], "not the same tokens"
    print(f"{args.model}: {len(prompts)} prompts x {n}, up to {args.tokens} tokens, tool latency {args.latency_ms:g} ms, "
          f"max {args.max_tool_calls} calls per completion; medians of {args.repeats} (turns with calls per run)")
    median = {name: [statistics.median(r[k] for r in runs) for k in range(4)] for name, runs in results.items()}
    for name, (wall, cpu, tokens, turns) in median.items():
        print(f"{name:>34}: {wall:6.2f} s wall {cpu:6.2f} s CPU {tokens:7.0f} model tokens "
              f"{tokens / wall:8.0f} tokens/s  {turns:4.0f} tool turns")
    cont = median["continuous"]
    for name in ("rounds, calls one by one", "rounds, a round's calls at once"):
        print(f"continuous vs {name}: {median[name][0] / cont[0]:.2f}x less wall time, "
              f"{(cont[2] / cont[0]) / (median[name][2] / median[name][0]):.2f}x the tokens/s")
    plain, rows_step = median["plain compiled rollout (no tools)"], median["continuous, no call run"]
    print(f"rows without tools: the per-row compiled step takes {rows_step[0] / plain[0]:.2f}x the plain loop's wall "
          f"time ({rows_step[1] / plain[1]:.2f}x its CPU) for the same tokens")


if __name__ == "__main__":
    main()
