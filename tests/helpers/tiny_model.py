"""Build a tiny random Qwen3 model + byte-level tokenizer folder that ``mlx_lm.load`` opens.

For fast engine tests: a couple of layers, hidden size 32, a 256-byte vocabulary plus the chat
special tokens, and a Qwen-style chat template that knows ``enable_thinking``.
"""

from __future__ import annotations

import json
from pathlib import Path

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"]

CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n{% endif %}"
    "{% endif %}"
)


def build_tokenizer(directory: Path) -> int:
    """Write tokenizer.json + tokenizer_config.json; return the vocabulary size."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from tokenizers.pre_tokenizers import ByteLevel

    alphabet = ByteLevel.alphabet()  # the 256 printable stand-ins for bytes
    vocab = {ch: i for i, ch in enumerate(sorted(alphabet))}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(SPECIAL_TOKENS)
    tok.save(str(directory / "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "chat_template": CHAT_TEMPLATE,
        "model_max_length": 4096,
    }
    (directory / "tokenizer_config.json").write_text(json.dumps(config, indent=2))
    return tok.get_vocab_size()


def build_tiny_model(
    directory: Path, *, seed: int = 0, hidden_size: int = 32, layers: int = 2, tie: bool = True
) -> Path:
    """Create the model folder (config.json, model.safetensors, tokenizer files) and return it."""
    import mlx.core as mx
    from mlx.utils import tree_flatten
    from mlx_lm.models import qwen3

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    vocab_size = build_tokenizer(directory)
    eos_id = vocab_size - len(SPECIAL_TOKENS) + SPECIAL_TOKENS.index("<|im_end|>")
    config = {
        "model_type": "qwen3",
        "hidden_size": hidden_size,
        "num_hidden_layers": layers,
        "intermediate_size": hidden_size * 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": hidden_size // 4,
        "rms_norm_eps": 1e-6,
        "vocab_size": vocab_size,
        "max_position_embeddings": 1024,
        "rope_theta": 10000.0,
        "tie_word_embeddings": tie,
        "eos_token_id": eos_id,
    }
    mx.random.seed(seed)
    model = qwen3.Model(qwen3.ModelArgs.from_dict(config))
    mx.eval(model.parameters())
    mx.save_safetensors(str(directory / "model.safetensors"), dict(tree_flatten(model.parameters())))
    (directory / "config.json").write_text(json.dumps(config, indent=2))
    return directory


def write_arith_data(path: Path, n: int = 16, seed: int = 0) -> Path:
    """A small ``prompt``/``answer`` JSONL with an extra ``level`` column."""
    import random

    rng = random.Random(seed)
    rows = []
    for i in range(n):
        a, b = rng.randint(0, 9), rng.randint(0, 9)
        rows.append({"prompt": f"{a}+{b}=", "answer": str(a + b), "level": i % 3})
    Path(path).write_text("".join(json.dumps(r) + "\n" for r in rows))
    return Path(path)


def write_config(directory: Path, model_dir: Path, extra: str = "") -> Path:
    """A config.toml for the tiny model and data; ``extra`` TOML is appended (it may add tables)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    write_arith_data(directory / "data.jsonl")
    text = f"""
[model]
path = "{model_dir}"

[data]
path = "data.jsonl"
eval_path = "data.jsonl"

[[rewards]]
name = "accuracy"

[[rewards]]
name = "length"
weight = 0.1

[checkpoint]
output_dir = "run"
{extra}
"""
    path = directory / "config.toml"
    path.write_text(text)
    return path
