"""Small random models of the architectures users fine-tune, as folders ``mlx_lm.load`` opens.

Each folder gets a ``config.json`` with the architecture's real config keys at toy sizes, random
weights saved from the mlx-lm model class, and the demo model's tokenizer (106 tokens, a chat
template), so nothing is downloaded. ``quantize`` makes a 4- or 8-bit copy with mlx-lm's own
``convert``.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from tests.conftest import EXAMPLES

TOKENIZER = EXAMPLES / "models" / "tiny-arith"
VOCAB = 106
# Sizes every architecture accepts and mlx's quantization needs (groups of 64 along each row).
_BASE: dict[str, Any] = {
    "hidden_size": 64, "num_hidden_layers": 2, "intermediate_size": 128, "num_attention_heads": 4,
    "num_key_value_heads": 2, "rms_norm_eps": 1e-6, "vocab_size": VOCAB, "max_position_embeddings": 512,
    "eos_token_id": 2, "bos_token_id": None, "pad_token_id": 0,
}

CONFIGS: dict[str, dict[str, Any]] = {
    "qwen2": {"rope_theta": 1e6, "tie_word_embeddings": True},
    "qwen3": {"head_dim": 16, "rope_theta": 1e6, "tie_word_embeddings": True},
    # Llama 3.x: untied head, 8 query heads on 2 KV heads, the "llama3" frequency scaling
    "llama": {"num_attention_heads": 8, "head_dim": 8, "rope_theta": 500000.0, "tie_word_embeddings": False,
              "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                               "high_freq_factor": 4.0, "original_max_position_embeddings": 256}},
    # Mistral 7B v0.3 / Nemo style: no sliding window (v0.1's 4096 window is the sliding case below)
    "mistral": {"rope_theta": 1e6, "tie_word_embeddings": False, "sliding_window": None},
    "gemma2": {"head_dim": 16, "query_pre_attn_scalar": 16, "attn_logit_softcapping": 50.0,
               "final_logit_softcapping": 30.0, "sliding_window": 8, "hidden_activation": "gelu_pytorch_tanh"},
    "gemma3_text": {"head_dim": 16, "query_pre_attn_scalar": 16, "sliding_window": 8, "sliding_window_pattern": 2,
                    "rope_local_base_freq": 10000.0, "rope_theta": 1e6},
    "phi3": {"rope_theta": 10000.0, "tie_word_embeddings": False},
    "qwen3_moe": {"head_dim": 16, "rope_theta": 1e6, "tie_word_embeddings": True, "num_experts": 4,
                  "num_experts_per_tok": 2, "decoder_sparse_step": 1, "mlp_only_layers": [],
                  "moe_intermediate_size": 64, "norm_topk_prob": True},
}
ARCHITECTURES = tuple(CONFIGS)

# One small GRPO step for a config.toml (tests.helpers.tiny_model.write_config appends it). Random toy
# models rarely stop or answer, so a reward that differs within a group gives the advantages.
STEP = """
[[rewards]]
function = "varied.py:varied"
[grpo]
group_size = 2
[generation]
max_completion_length = 6
[training]
batch_size = 2
learning_rate = 1e-2
"""
LORA = "\n[model.lora]\nrank = 4\nalpha = 8.0\nlayers = -1\n"
VARIED = "def varied(completions, **kwargs):\n    return [float(len(set(str(c))) % 5) for c in completions]\n"


def step_config(directory: Path, model: Path, extra: str = "") -> Path:
    """A config.toml in ``directory`` for one small step of ``model`` (with its reward file)."""
    from tests.helpers.tiny_model import write_config

    directory.mkdir(parents=True, exist_ok=True)
    (directory / "varied.py").write_text(VARIED)
    return write_config(directory, model, STEP + extra)


def build(directory: Path, model_type: str, *, seed: int = 0, **overrides: Any) -> Path:
    """Write a random ``model_type`` model folder and return it."""
    import mlx.core as mx
    from mlx.utils import tree_flatten
    from mlx_lm.utils import _get_classes

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    config = {**_BASE, "model_type": model_type, **CONFIGS[model_type], **overrides}
    model_class, args_class = _get_classes(config)
    mx.random.seed(seed)
    model = model_class(args_class.from_dict(config))
    weights = dict(tree_flatten(model.parameters()))
    # Random init at mlx's default scale makes 2-layer toys saturate; small weights keep logits sane.
    weights = {k: (v * 0.5 if v.ndim > 1 else v) for k, v in weights.items()}
    mx.save_safetensors(str(directory / "model.safetensors"), weights, metadata={"format": "mlx"})
    (directory / "config.json").write_text(json.dumps(config, indent=2))
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "generation_config.json"):
        if (TOKENIZER / name).exists():
            shutil.copy(TOKENIZER / name, directory / name)
    return directory


def quantize(source: Path, target: Path, bits: int) -> Path:
    """``source`` quantized to ``bits`` with mlx-lm's own converter (groups of 64)."""
    from mlx_lm import convert

    convert(str(source), mlx_path=str(target), quantize=True, q_bits=bits, q_group_size=64)
    return Path(target)
