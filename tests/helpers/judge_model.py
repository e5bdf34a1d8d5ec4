"""A tiny judge model whose verdict is known: its next token is ``yes`` ("y", the first token of
"yes") when its input holds a digit and ``no`` ("n") otherwise, with probability ~1 either way
(``yes="9", no="0"``: a judge that replies a number). Weights are set, not trained.

A one-block Qwen3 on the tests' byte-level tokenizer (tests/helpers/tiny_model.py), hidden size 32:

- every token's embedding is 1 along dimension 1; a digit's is also 1 along dimension 0;
- the block's queries and keys are zero, so attention is uniform over the positions so far; one
  head's value reads dimension 0 and its output writes dimension 2: at the last position, dimension
  2 holds 4 × (the share of digit tokens in the input); the MLP's output is zero;
- the untied LM head scores ``yes`` with 2000 × dim 2 − 20 × dim 1, ``no`` with 0, every other
  token with −50 × dim 1: any digit in an input of up to a few hundred tokens puts ``yes`` far
  above ``no``, none puts it 20+ below.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.helpers.tiny_model import SPECIAL_TOKENS, build_tokenizer

DIGITS = "0123456789"


def build_digit_judge(directory: Path, yes: str = "y", no: str = "n") -> Path:
    import mlx.core as mx
    import numpy as np
    from mlx.utils import tree_flatten
    from mlx_lm.models import qwen3
    from tokenizers import Tokenizer

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    vocab_size = build_tokenizer(directory)
    tok = Tokenizer.from_file(str(directory / "tokenizer.json"))
    hidden = 32
    config = {
        "model_type": "qwen3", "hidden_size": hidden, "num_hidden_layers": 1, "intermediate_size": 64,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8, "rms_norm_eps": 1e-6,
        "vocab_size": vocab_size, "max_position_embeddings": 1024, "rope_theta": 10000.0,
        "tie_word_embeddings": False,
        "eos_token_id": vocab_size - len(SPECIAL_TOKENS) + SPECIAL_TOKENS.index("<|im_end|>"),
    }
    model = qwen3.Model(qwen3.ModelArgs.from_dict(config))
    weights = {k: np.zeros(v.shape, dtype=np.float32) for k, v in tree_flatten(model.parameters())}
    for name in weights:
        if name.endswith("norm.weight"):
            weights[name][:] = 1.0
    embed = weights["model.embed_tokens.weight"]
    embed[:, 1] = 1.0
    for d in DIGITS:
        embed[tok.encode(d).ids[0], 0] = 1.0
    weights["model.layers.0.self_attn.v_proj.weight"][0, 0] = 1.0  # kv head 0, value dim 0 <- dim 0
    weights["model.layers.0.self_attn.o_proj.weight"][2, 0] = 1.0  # head 0, value dim 0 -> dim 2
    head = weights["lm_head.weight"]
    head[:, 1] = -50.0
    head[tok.encode(yes).ids[0], 1], head[tok.encode(yes).ids[0], 2] = -20.0, 2000.0
    head[tok.encode(no).ids[0], 1] = 0.0
    mx.save_safetensors(str(directory / "model.safetensors"), {k: mx.array(v) for k, v in weights.items()})
    (directory / "config.json").write_text(json.dumps(config, indent=2))
    return directory
