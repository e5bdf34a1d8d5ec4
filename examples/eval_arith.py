"""Held-out exact-answer accuracy of a model on the arithmetic demo task.

Run it on the shipped demo model (or on a GRPO run's saved weights) from the repository root:

    python examples/eval_arith.py                                   # examples/models/tiny-arith
    python examples/eval_arith.py runs/quickstart/final --n 200 --temperature 1.0 --seed 0

or import it:

    from eval_arith import evaluate
    evaluate("examples/models/tiny-arith", "examples/data/arith_eval.jsonl", n=200,
             temperature=1.0, seed=0)  # -> 0.31

A completion is correct when the text inside its first `<answer>...</answer>` equals the row's `answer`
(numerically when both are numbers). A completion with no answer tags is wrong: the demo asks for the
format as well as the number. Generation is batched with `mlx_lm.generate.batch_generate`, and prompts
are rendered with the tokenizer's chat template, exactly as the GRPO worker renders them.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any

import mlx.core as mx
from mlx_lm.generate import batch_generate
from mlx_lm.sample_utils import make_sampler

_ANSWER = re.compile(r"<answer>\s*(.*?)\s*</answer>", re.DOTALL)


def extract_answer(completion: str) -> str | None:
    """The text inside the first `<answer>...</answer>` pair, or None when there is none."""
    match = _ANSWER.search(completion)
    return match.group(1) if match else None


def is_correct(completion: str, answer: str) -> bool:
    """Whether the completion's tagged answer equals `answer` (numerically when both are numbers)."""
    given = extract_answer(completion)
    if given is None:
        return False
    try:
        return float(given) == float(answer)
    except ValueError:
        return given == answer.strip()


def load_rows(data_path: str | Path, n: int | None = None) -> list[dict[str, Any]]:
    """The first `n` rows (all when None) of a JSONL file of {"prompt", "answer"} rows."""
    rows = []
    with open(data_path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                rows.append(json.loads(line))
            if n is not None and len(rows) >= n:
                break
    return rows


def render_prompt(tokenizer, prompt: str) -> list[int]:
    """Token ids of one user turn plus the assistant header, via the chat template."""
    messages = [{"role": "user", "content": prompt}]
    return list(tokenizer.apply_chat_template(messages, add_generation_prompt=True))


def sample_completions(
    model,
    tokenizer,
    prompts: list[str],
    *,
    temperature: float = 1.0,
    seed: int = 0,
    max_tokens: int = 16,
) -> list[str]:
    """One sampled completion per prompt, generated in a single batch."""
    mx.random.seed(seed)
    tokens = [render_prompt(tokenizer, p) for p in prompts]
    # temp=0 is greedy in make_sampler.
    sampler = make_sampler(temp=temperature)
    size = max(len(tokens), 1)
    response = batch_generate(
        model,
        tokenizer,
        tokens,
        max_tokens=max_tokens,
        sampler=sampler,
        completion_batch_size=size,
        prefill_batch_size=size,
    )
    return response.texts


def accuracy(
    model,
    tokenizer,
    rows: list[dict[str, Any]],
    *,
    temperature: float = 1.0,
    seed: int = 0,
    max_tokens: int = 16,
) -> tuple[float, float]:
    """(exact-answer accuracy, answer-format rate) of one sampled completion per row."""
    if not rows:
        return 0.0, 0.0
    texts = sample_completions(
        model,
        tokenizer,
        [r["prompt"] for r in rows],
        temperature=temperature,
        seed=seed,
        max_tokens=max_tokens,
    )
    correct = sum(is_correct(t, str(r["answer"])) for t, r in zip(texts, rows))
    formatted = sum(extract_answer(t) is not None for t in texts)
    return correct / len(rows), formatted / len(rows)


def evaluate(
    model_dir: str | Path,
    data_path: str | Path,
    n: int | None = 200,
    temperature: float = 1.0,
    seed: int = 0,
) -> float:
    """Exact-answer accuracy of the model in `model_dir` on the first `n` rows of `data_path`."""
    from mlx_lm import load

    model, tokenizer = load(str(model_dir))
    return accuracy(model, tokenizer, load_rows(data_path, n), temperature=temperature, seed=seed)[0]


def main() -> None:
    here = Path(__file__).resolve().parent
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model_dir", nargs="?", default=str(here / "models" / "tiny-arith"))
    parser.add_argument("--data", default=str(here / "data" / "arith_eval.jsonl"))
    parser.add_argument("--n", type=int, default=200)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    from mlx_lm import load

    model, tokenizer = load(args.model_dir)
    rows = load_rows(args.data, args.n)
    acc, fmt = accuracy(model, tokenizer, rows, temperature=args.temperature, seed=args.seed)
    print(
        f"{args.model_dir}: accuracy {acc:.1%}, answer format {fmt:.1%} "
        f"({len(rows)} rows of {args.data}, temperature {args.temperature}, seed {args.seed})"
    )


if __name__ == "__main__":
    main()
