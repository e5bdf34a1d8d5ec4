"""The agent demo: a tiny model that must call a calculator tool to multiply two-digit numbers.

Run from the repository root (no network):

    python examples/agent_demo.py build        # examples/models/tiny-agent + examples/data/mul*.jsonl
    python examples/agent_demo.py eval          # held-out accuracy and tool-call rate of tiny-agent
    python examples/agent_demo.py eval runs/agent_calculator/final   # ... after GRPO
    grpo-tui run examples/agent_calculator.toml                       # (or: worker ... --plain)

How the start model is made: the shipped tiny-arith model (examples/build_tiny_arith.py; a 0.4M
parameter Qwen3 with a character-level tokenizer) gets a short supervised warm-up on "What is a*b?"
conversations of two kinds: ``--tool-share`` of them call the tool
(``<tool_call>{"name": "multiply", "arguments": {"a": A, "b": B}}</tool_call>``, then the ``tool``
message with the product as the chat template renders it, then ``<answer>P</answer>``) and the rest
answer at once with a random four-digit guess. So the warm-up model calls the tool only part of the
time and its direct answers are almost always wrong: GRPO (reward: accuracy) has to learn to call the
tool. The tool-result tokens are masked out of the warm-up loss exactly as the GRPO loss masks them,
and they are rendered by the same code as in the rollouts (``worker.engine.agent.tool_glue``); the
end-of-turn token after the call is the model's own (the rollout runs a turn's calls when the model
ends the turn).
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import time
from pathlib import Path

from grpo_tui.common import blas

if __name__ == "__main__":  # before MLX is imported: preload an optimized BLAS if installed (Linux only);
    blas.reexec_if_needed()  # never when imported (a test process must not re-execute itself)

import mlx.core as mx  # noqa: E402
import mlx.nn as nn  # noqa: E402
import mlx.optimizers as optim  # noqa: E402
from mlx_lm import load  # noqa: E402
from mlx_lm.utils import save_model  # noqa: E402

from grpo_tui.protocol.config import GenerationConfig, ToolConfig  # noqa: E402
from grpo_tui.protocol.messages import Turn  # noqa: E402
from grpo_tui.worker.engine.policy import agent  # noqa: E402
from grpo_tui.worker.engine.models import plan as engine_plan
from grpo_tui.worker.engine.scoring.tools import load_tools  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from eval_arith import is_correct, load_rows, render_prompt  # noqa: E402

TOOL = f"{HERE / 'tools' / 'calculator.py'}:multiply"
EOS = "<|im_end|>"


def make_problems(seed: int) -> dict[str, list[dict[str, str]]]:
    """Two-digit products, split into disjoint eval / train (GRPO) / warm-up pools."""
    problems = [(a, b) for a in range(10, 100) for b in range(10, 100)]
    random.Random(seed).shuffle(problems)
    rows = [{"prompt": f"What is {a}*{b}?", "answer": str(a * b)} for a, b in problems]
    return {"eval": rows[:200], "train": rows[200:2200], "sft": rows[2200:]}


def call_text(row: dict[str, str]) -> str:
    a, b = row["prompt"][8:-1].split("*")
    return '<tool_call>{"name": "multiply", "arguments": {"a": %s, "b": %s}}</tool_call>' % (a, b)


def encode(tokenizer, row: dict[str, str], use_tool: bool, rng: random.Random) -> tuple[list[int], list[float]]:
    """(token ids, loss mask over ids[1:]): the mask is 1 on the model's own tokens only."""
    prompt = render_prompt(tokenizer, row["prompt"])
    pieces: list[tuple[list[int], float]] = [(prompt, 0.0)]
    if use_tool:
        # The model ends its tool-calling turn itself (its end-of-turn token is trained on), as the
        # rollout expects; the template's rest of the turn, the tool message and the next prompt are not.
        glue = agent.tool_glue(tokenizer, [Turn(role="tool", content=row["answer"], name="multiply")], False,
                               tokenizer.eos_token_id)
        call = tokenizer.encode(call_text(row), add_special_tokens=False) + [tokenizer.eos_token_id]
        pieces += [(call, 1.0), (glue, 0.0)]
        answer = row["answer"]
    else:
        answer = str(rng.randint(100, 9999))  # a guess: the model cannot multiply on its own
    pieces.append((tokenizer.encode(f"<answer>{answer}</answer>{EOS}", add_special_tokens=False), 1.0))
    ids = [t for p, _ in pieces for t in p]
    weights = [w for p, w in pieces for _ in p]
    return ids, weights[1:]


def warm_up(model, tokenizer, rows, args) -> None:
    rng = random.Random(args.seed)
    examples = [encode(tokenizer, r, rng.random() < args.tool_share, rng) for r in rows]
    optimizer = optim.AdamW(learning_rate=args.lr, weight_decay=0.01)

    def loss_fn(model, inputs, targets, mask):
        ce = nn.losses.cross_entropy(model(inputs), targets, reduction="none")
        return (ce * mask).sum() / mask.sum()

    loss_and_grad = nn.value_and_grad(model, loss_fn)
    start = time.perf_counter()
    for step in range(1, args.steps + 1):
        batch = rng.sample(examples, args.batch_size)
        width = max(len(ids) for ids, _ in batch)
        inputs = mx.array([ids[:-1] + [0] * (width - len(ids)) for ids, _ in batch])
        targets = mx.array([ids[1:] + [0] * (width - len(ids)) for ids, _ in batch])
        mask = mx.array([m + [0.0] * (width - len(ids)) for ids, m in batch])
        loss, grads = loss_and_grad(model, inputs, targets, mask)
        grads, _ = optim.clip_grad_norm(grads, 1.0)
        optimizer.update(model, grads)
        mx.eval(loss, model.parameters(), optimizer.state)
        if step % 50 == 0 or step == args.steps:
            print(f"warm-up step {step}  loss {loss.item():.3f}  {time.perf_counter() - start:.0f}s", flush=True)


def evaluate(model_dir: Path, data: Path, n: int, temperature: float, seed: int) -> tuple[float, float]:
    """(exact-answer accuracy, share of completions that called the tool) on the first ``n`` rows,
    one completion each, rolled out with the tool exactly as the GRPO worker does."""
    model, tokenizer = load(str(model_dir))
    rows = load_rows(data, n)
    tools = load_tools([ToolConfig(function=TOOL)])
    gen = GenerationConfig(max_completion_length=128, temperature=temperature or 1.0, max_tool_calls=2)
    mx.random.seed(seed)
    plan = engine_plan.for_generation(model)  # the compiled rollout with MLX's own kernels (not patched)
    completions = agent.generate(model, tokenizer, [render_prompt(tokenizer, r["prompt"]) for r in rows], 1, gen,
                                 tools, greedy=temperature == 0, plan=plan)
    correct = sum(is_correct(c.text, r["answer"]) for c, r in zip(completions, rows))
    called = sum(any(t.role == "tool" for t in c.turns) for c in completions)
    return correct / len(rows), called / len(rows)


def build(args) -> None:
    print("BLAS:", blas.describe(blas.active_blas()))
    mx.random.seed(args.seed)
    pools = make_problems(args.seed)
    for name, file in (("train", "mul.jsonl"), ("eval", "mul_eval.jsonl")):
        with open(HERE / "data" / file, "w", encoding="utf-8") as f:
            f.writelines(json.dumps(r) + "\n" for r in pools[name])
    model, tokenizer = load(str(HERE / "models" / "tiny-arith"))
    warm_up(model, tokenizer, pools["sft"], args)
    out = HERE / "models" / "tiny-agent"
    if out.exists():
        shutil.rmtree(out)
    shutil.copytree(HERE / "models" / "tiny-arith", out)
    for f in out.glob("model*.safetensors*"):
        f.unlink()
    save_model(out, model)
    print("wrote", out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build")
    b.add_argument("--seed", type=int, default=0)
    b.add_argument("--steps", type=int, default=1200)
    b.add_argument("--batch-size", type=int, default=32)
    b.add_argument("--lr", type=float, default=3e-3)
    b.add_argument("--tool-share", type=float, default=0.3)
    e = sub.add_parser("eval")
    e.add_argument("model_dir", nargs="?", default=str(HERE / "models" / "tiny-agent"))
    e.add_argument("--data", default=str(HERE / "data" / "mul_eval.jsonl"))
    e.add_argument("--n", type=int, default=200)
    e.add_argument("--temperature", type=float, default=1.0)
    e.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.command == "build":
        build(args)
    else:
        acc, called = evaluate(Path(args.model_dir), Path(args.data), args.n, args.temperature, args.seed)
        print(f"{args.model_dir}: held-out accuracy {acc:.1%}, tool called in {called:.1%} "
              f"({args.n} rows, temperature {args.temperature:g})")


if __name__ == "__main__":
    main()
