"""Build the offline demo: a tiny Qwen3-architecture model that is right some of the time at arithmetic.

Run from the repository root (no network):

    python examples/build_tiny_arith.py          # --help for the knobs (seed, lr, target, ...)

On 2 CPU cores it takes about 2 minutes with MKL (the `fast-blas` extra, see below). With mlx[cpu]'s
reference BLAS a warm-up step takes about 1.1 s on two idle cores, so about 8-9 minutes for the 400
steps (more when other work shares the cores).

It writes, reproducibly (everything is seeded):
- examples/models/tiny-arith/  config.json, model.safetensors(.index.json), tokenizer.json,
  tokenizer_config.json (with the chat template), special_tokens_map.json, generation_config.json:
  a folder that `mlx_lm.load` opens offline;
- examples/data/arith.jsonl (GRPO train prompts) and examples/data/arith_eval.jsonl (held out), rows
  {"prompt": "What is 23+45?", "answer": "68"};
- examples/data/mixed.jsonl and mixed_eval.jsonl: easy sums beside products the model never saw
  (`make_mixed`, for bench/curriculum.py); `--data-only` writes the data files alone.

How it is made:
1. The problems are every "a+b" with two-digit a and b (8,100 in all), shuffled once and split into
   disjoint pools: 200 eval rows, 3,000 GRPO train rows, 256 dev rows (early stopping) and the rest
   (4,644) for the warm-up. So neither the GRPO prompts nor the eval rows are seen during the warm-up.
2. A character-level tokenizer built with `tokenizers` (printable ASCII and newline, plus whole tokens
   for the chat markers, the role names and `<answer>`/`</answer>`) and a Qwen-style chat template.
3. A 2-layer Qwen3 model (hidden 128) trained with supervised fine-tuning on
   "What is a+b?" -> "<answer>N</answer><|im_end|>", loss on the completion only. Every few steps the
   dev accuracy is sampled at temperature 1.0; training stops once it reaches `--target`, so the model
   emits the answer format reliably but is right only part of the time: GRPO has a signal and headroom.

On Linux the script re-executes itself with MKL preloaded when the `fast-blas` extra is installed
(`grpo_tui.common.blas`): mlx[cpu]'s reference BLAS is about 10x slower. Results are reproducible for
a given BLAS; another BLAS rounds differently and may stop the warm-up a few steps earlier or later.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import time
from pathlib import Path

try:  # before MLX is imported: preload an optimized BLAS if one is installed (Linux only)
    from grpo_tui.common import blas

    blas.reexec_if_needed()
except ImportError:
    blas = None

import mlx.core as mx  # noqa: E402
import mlx.nn as nn
import mlx.optimizers as optim
from mlx.utils import tree_flatten
from mlx_lm.models import qwen3
from mlx_lm.tokenizer_utils import load as load_tokenizer
from mlx_lm.utils import save_config, save_model
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers

sys.path.insert(0, str(Path(__file__).resolve().parent))
from eval_arith import accuracy, load_rows  # noqa: E402

HERE = Path(__file__).resolve().parent
EOS, BOS_PAD, IM_START, UNK = "<|im_end|>", "<|endoftext|>", "<|im_start|>", "<unk>"
# Whole tokens that are not special: they stay in decoded text (rewards read the answer tags).
WORD_TOKENS = ["<answer>", "</answer>", "system", "user", "assistant"]

# Qwen-like: the same turn markers and generation prompt. mlx-lm passes `enable_thinking` on every
# call; Jinja ignores variables a template does not use, so any value renders the same prompt.
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' }}"
    "{%- if message['content'] is string %}{{- message['content'] }}{%- endif %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
    "{#- enable_thinking is accepted and ignored: this model has no thinking mode. #}"
)


def make_problems(seed: int) -> dict[str, list[dict[str, str]]]:
    """All two-digit additions, split into disjoint eval / train (GRPO) / dev / sft pools."""
    # Addition only: with subtraction (and its negative results) in the mix, a model this small
    # needs several times more warm-up steps to get anywhere, and the build would not fit on a CPU.
    problems = [(a, b) for a in range(10, 100) for b in range(10, 100)]
    random.Random(seed).shuffle(problems)
    rows = [{"prompt": f"What is {a}+{b}?", "answer": str(a + b)} for a, b in problems]
    return {
        "eval": rows[:200],
        "train": rows[200:3200],
        "dev": rows[3200:3456],
        "sft": rows[3456:],
    }


def make_mixed(seed: int, pools: dict[str, list[dict[str, str]]]) -> dict[str, list[dict[str, str]]]:
    """A mixed-difficulty set for the curriculum's bench (bench/curriculum.py): easy sums (from the GRPO
    and eval pools above) beside products of a digit and a two-digit number, which the model never
    saw in its warm-up: 200 + 200 train rows, 100 + 100 held out, shuffled."""
    products = [(a, b) for a in range(2, 10) for b in range(10, 100)]
    random.Random(seed + 1).shuffle(products)
    rows = [{"prompt": f"What is {a}*{b}?", "answer": str(a * b)} for a, b in products]
    train, held_out = pools["train"][:200] + rows[:200], pools["eval"][:100] + rows[200:300]
    random.Random(seed + 2).shuffle(train)
    random.Random(seed + 3).shuffle(held_out)
    return {"train": train, "eval": held_out}


def build_tokenizer(out_dir: Path) -> None:
    """Write tokenizer.json, tokenizer_config.json and special_tokens_map.json to `out_dir`."""
    specials = [BOS_PAD, IM_START, EOS, UNK]
    chars = [chr(i) for i in range(32, 127)] + ["\n", "\t"]
    vocab = {tok: i for i, tok in enumerate(specials + WORD_TOKENS + chars)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    # One piece per character; added tokens are matched before this runs.
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    tok.decoder = decoders.Fuse()
    tok.add_special_tokens([AddedToken(t, normalized=False, special=True) for t in specials])
    tok.add_tokens([AddedToken(t, normalized=False, special=False) for t in WORD_TOKENS])
    tok.save(str(out_dir / "tokenizer.json"))

    special_map = {"bos_token": None, "eos_token": EOS, "pad_token": BOS_PAD, "unk_token": UNK}
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        **special_map,
        "additional_special_tokens": [IM_START, EOS],
        "add_bos_token": False,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": 512,
        "padding_side": "left",
        "chat_template": CHAT_TEMPLATE,
    }
    (out_dir / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")
    special_map = {k: v for k, v in special_map.items() if v is not None}
    (out_dir / "special_tokens_map.json").write_text(json.dumps(special_map, indent=2) + "\n")


def model_config(tokenizer) -> dict:
    """The config.json of the demo model (mlx-lm's `qwen3` model type)."""
    return {
        "model_type": "qwen3",
        "architectures": ["Qwen3ForCausalLM"],
        "hidden_size": 128,
        "num_hidden_layers": 2,
        "intermediate_size": 384,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 32,
        "rms_norm_eps": 1e-6,
        "vocab_size": len(tokenizer),
        "max_position_embeddings": 512,
        "rope_theta": 10000.0,
        "tie_word_embeddings": True,
        "torch_dtype": "float32",
        "bos_token_id": None,
        "eos_token_id": tokenizer.convert_tokens_to_ids(EOS),
        "pad_token_id": tokenizer.convert_tokens_to_ids(BOS_PAD),
    }


def encode(tokenizer, row: dict[str, str]) -> tuple[list[int], int]:
    """Prompt + target token ids, and the prompt length (the loss skips the prompt)."""
    messages = [{"role": "user", "content": row["prompt"]}]
    prompt = list(tokenizer.apply_chat_template(messages, add_generation_prompt=True))
    target = tokenizer.encode(f"<answer>{row['answer']}</answer>{EOS}", add_special_tokens=False)
    return prompt + target, len(prompt)


def make_batch(examples: list[tuple[list[int], int]], pad_id: int) -> tuple[mx.array, ...]:
    """Right-padded inputs, next-token targets and a mask that is 1 on completion targets."""
    width = max(len(ids) for ids, _ in examples)
    inputs, targets, mask = [], [], []
    for ids, prompt_len in examples:
        padded = ids + [pad_id] * (width - len(ids))
        inputs.append(padded[:-1])
        targets.append(padded[1:])
        # Target position t predicts token t+1: completion tokens start at prompt_len.
        mask.append([float(prompt_len <= t + 1 < len(ids)) for t in range(width - 1)])
    return mx.array(inputs), mx.array(targets), mx.array(mask)


def loss_fn(model: nn.Module, inputs: mx.array, targets: mx.array, mask: mx.array) -> mx.array:
    logits = model(inputs)
    ce = nn.losses.cross_entropy(logits, targets, reduction="none")
    return (ce * mask).sum() / mask.sum()


def train(
    model: nn.Module,
    tokenizer,
    pools: dict[str, list[dict[str, str]]],
    args: argparse.Namespace,
) -> int:
    """Warm-up SFT until dev accuracy (sampled at temperature 1.0) reaches `args.target`."""
    rng = random.Random(args.seed)
    examples = [encode(tokenizer, row) for row in pools["sft"]]
    pad_id = tokenizer.convert_tokens_to_ids(BOS_PAD)
    schedule = optim.join_schedules(
        [optim.linear_schedule(1e-5, args.lr, 20), optim.cosine_decay(args.lr, args.max_steps)],
        [20],
    )
    optimizer = optim.AdamW(learning_rate=schedule, weight_decay=0.01)
    loss_and_grad = nn.value_and_grad(model, loss_fn)

    def step(inputs, targets, mask):
        loss, grads = loss_and_grad(model, inputs, targets, mask)
        grads, _ = optim.clip_grad_norm(grads, 1.0)
        optimizer.update(model, grads)
        return loss

    start, losses = time.perf_counter(), []
    for it in range(1, args.max_steps + 1):
        batch = make_batch(rng.sample(examples, args.batch_size), pad_id)
        loss = step(*batch)
        mx.eval(loss, model.parameters(), optimizer.state)
        losses.append(loss.item())
        if it % args.eval_every == 0 or it == args.max_steps:
            acc, fmt = accuracy(model, tokenizer, pools["dev"], temperature=1.0, seed=args.seed)
            mean_loss = sum(losses) / len(losses)
            losses.clear()
            print(
                f"step {it:4d}  loss {mean_loss:.3f}  dev accuracy {acc:6.1%}  "
                f"format {fmt:6.1%}  {time.perf_counter() - start:6.1f}s",
                flush=True,
            )
            if acc >= args.target and fmt >= 0.9:
                return it
    print(f"warning: dev accuracy never reached {args.target:.0%} in {args.max_steps} steps")
    return args.max_steps


def write_jsonl(path: Path, rows: list[dict[str, str]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description="Build the tiny-arith demo model and data.")
    parser.add_argument("--out", type=Path, default=HERE / "models" / "tiny-arith")
    parser.add_argument("--data-dir", type=Path, default=HERE / "data")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--max-steps", type=int, default=1000)
    parser.add_argument("--eval-every", type=int, default=25)
    parser.add_argument("--target", type=float, default=0.25, help="dev accuracy that ends the warm-up")
    parser.add_argument("--data-only", action="store_true", help="write the data files only (no model)")
    args = parser.parse_args()

    t0 = time.perf_counter()
    if blas is not None:
        print("BLAS:", blas.describe(blas.active_blas()))
    mx.random.seed(args.seed)
    pools = make_problems(args.seed)
    print({name: len(rows) for name, rows in pools.items()}, "problems per pool")
    write_jsonl(args.data_dir / "arith.jsonl", pools["train"])
    write_jsonl(args.data_dir / "arith_eval.jsonl", pools["eval"])
    mixed = make_mixed(args.seed, pools)
    write_jsonl(args.data_dir / "mixed.jsonl", mixed["train"])
    write_jsonl(args.data_dir / "mixed_eval.jsonl", mixed["eval"])
    if args.data_only:
        return

    if args.out.exists():
        shutil.rmtree(args.out)
    args.out.mkdir(parents=True)
    build_tokenizer(args.out)
    tokenizer = load_tokenizer(args.out)
    config = model_config(tokenizer)
    print(f"tokenizer: {len(tokenizer)} tokens; prompt example:")
    print(repr(tokenizer.apply_chat_template(
        [{"role": "user", "content": pools["eval"][0]["prompt"]}],
        add_generation_prompt=True, tokenize=False,
    )))

    model = qwen3.Model(qwen3.ModelArgs.from_dict(config))
    mx.eval(model.parameters())
    n_params = sum(v.size for _, v in tree_flatten(model.parameters()))
    print(f"model: qwen3, {n_params / 1e6:.2f}M parameters")

    steps = train(model, tokenizer, pools, args)
    save_model(args.out, model)
    save_config(config, args.out / "config.json")
    generation = {"eos_token_id": config["eos_token_id"], "pad_token_id": config["pad_token_id"]}
    (args.out / "generation_config.json").write_text(json.dumps(generation, indent=2) + "\n")

    # Measure from disk, so the number is the shipped folder's and the folder is known to load.
    from mlx_lm import load

    model, tokenizer = load(str(args.out))
    rows = load_rows(args.data_dir / "arith_eval.jsonl")
    acc, fmt = accuracy(model, tokenizer, rows, temperature=1.0, seed=args.seed)
    size = sum(p.stat().st_size for p in args.out.iterdir())
    print(
        f"done in {time.perf_counter() - t0:.0f}s after {steps} steps: held-out accuracy {acc:.1%}, "
        f"answer format {fmt:.1%} ({len(rows)} rows, temperature 1.0); {args.out} is "
        f"{size / 1e6:.1f} MB"
    )


if __name__ == "__main__":
    main()
