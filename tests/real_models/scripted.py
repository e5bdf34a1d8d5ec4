"""A Qwen3 with the real Qwen BPE vocabulary whose weights make it write one chosen token sequence.

Random weights almost never emit ``<think>``, ``<tool_call>`` or a character split across tokens,
so this model is wired to: every block's output projections are zero (the residual stream is the
input embedding), the i-th input token of the script has the one-hot embedding e_i, and the
untied LM head row of the token that must follow it is 100·e_i. Whatever the sampler (temperature
1, top-p, a repetition penalty), the model writes ``script`` after the prompt's last token
``start``. Every token may appear once in the script (its successor must be unique): texts are
split into distinct tokens, longest first, and may be forced into single bytes to split a
character across tokens. The ids go through the same engine as any model's.
"""

from __future__ import annotations

import functools
import json
import shutil
from pathlib import Path

from tests.real_models import qwen_bpe

HIDDEN = 128  # up to 128 scripted input tokens


@functools.cache
def _ranks() -> dict[bytes, int]:
    return qwen_bpe.load_ranks(qwen_bpe.tiktoken_file())  # a rank is the token id


def byte_ids(text: str) -> list[int]:
    """``text`` as one single-byte token per UTF-8 byte (a 3-byte CJK character -> 3 tokens)."""
    ranks = _ranks()
    return [ranks[bytes([b])] for b in text.encode("utf-8")]


def distinct_ids(text: str, used: set[int]) -> list[int]:
    """``text`` as byte-level BPE tokens none of which is in ``used`` (updated): a depth-first search
    over splits, longest tokens first."""
    ranks = _ranks()
    data = text.encode("utf-8")
    taken = set(used)

    def search(pos: int) -> list[int] | None:
        if pos == len(data):
            return []
        for size in range(min(16, len(data) - pos), 0, -1):
            rank = ranks.get(data[pos : pos + size])
            if rank is None or rank in taken:
                continue
            taken.add(rank)
            rest = search(pos + size)
            if rest is not None:
                return [rank, *rest]
            taken.discard(rank)
        return None

    out = search(0)
    if out is None:
        raise ValueError(f"{text!r} cannot be written with distinct unused tokens")
    used.update(out)
    return out


def compose(start: int, *parts: int | str | tuple[str, str]) -> list[int]:
    """A script of distinct ids: an int is an id (a special token), a str is text, ``("bytes", s)``
    is ``s`` in single-byte tokens."""
    used = {start}
    script: list[int] = []
    for part in parts:
        if isinstance(part, int):
            ids = [part]
        elif isinstance(part, tuple):
            ids = byte_ids(part[1])
        else:
            ids = distinct_ids(part, used)
        script += ids
        used.update(ids)
    if len(set(script)) != len(script) or start in script:
        raise ValueError("a scripted token repeats: its successor would be ambiguous")
    return script


def build_scripted_model(base: Path, directory: Path, start: int, script: list[int]) -> Path:
    """Copy ``base``'s tokenizer files into ``directory`` and write the wired weights."""
    import mlx.core as mx
    import numpy as np

    inputs = [start] + script[:-1]
    if len(inputs) > HIDDEN:
        raise ValueError(f"a script of at most {HIDDEN} tokens")
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "special_tokens_map.json",
                 "generation_config.json"):  # fmt: skip
        shutil.copy(base / name, directory / name)
    config = dict(qwen_bpe.MODEL_CONFIG, hidden_size=HIDDEN, intermediate_size=2 * HIDDEN, head_dim=HIDDEN // 4,
                  tie_word_embeddings=False)  # fmt: skip
    (directory / "config.json").write_text(json.dumps(config, indent=2))

    from mlx.utils import tree_flatten
    from mlx_lm.models import qwen3

    mx.random.seed(1)
    weights = dict(tree_flatten(qwen3.Model(qwen3.ModelArgs.from_dict(config)).parameters()))
    for name, value in weights.items():
        if name.endswith(("o_proj.weight", "down_proj.weight")):
            weights[name] = mx.zeros_like(value)
    rng = np.random.default_rng(0)
    vocab = config["vocab_size"]
    embed = rng.normal(0, 0.01, (vocab, HIDDEN)).astype(np.float32)
    head = rng.normal(0, 0.01, (vocab, HIDDEN)).astype(np.float32)
    for i, (token, following) in enumerate(zip(inputs, script)):
        embed[token] = 0.0
        embed[token, i] = 1.0
        head[following, i] = 100.0
    weights["model.embed_tokens.weight"] = mx.array(embed)
    weights["lm_head.weight"] = mx.array(head)
    mx.save_safetensors(str(directory / "model.safetensors"), weights, metadata={"format": "mlx"})
    return directory
