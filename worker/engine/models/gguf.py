"""llama.cpp's GGUF files as models: converted once into an mlx-lm folder, cached by the file's hash.

MLX reads GGUF itself (``mx.load(path, return_metadata=True)``): Q4_0, Q4_1 and Q8_0 tensors arrive
as MLX affine-quantized weights (group size 32: packed ``weight``, ``scales``, ``biases``), float
tensors as they are. What is left to do here, as llama.cpp's ``convert_hf_to_gguf.py`` did it in
reverse:

- the tensor names (``blk.N.attn_q.weight`` → ``model.layers.N.self_attn.q_proj.weight``);
- the llama family's Q and K row permutation (llama.cpp reorders each head's rows from the
  Hugging Face rotate-half layout to interleaved pairs), undone on the weights and, row for row, on
  the scales and biases of quantized ones; qwen2/qwen3 are written unpermuted;
- ``config.json`` from the ``<arch>.*`` metadata, with mlx-lm's quantization block (per module when a
  file mixes Q4 and Q8, as llama.cpp's Q4 files do for the embedding);
- ``tokenizer.json`` built with ``tokenizers`` from ``tokenizer.ggml.*`` (a byte-level BPE with the
  pre-tokenizer llama.cpp names in ``tokenizer.ggml.pre``, control tokens special), and
  ``tokenizer_config.json`` with the chat template.

The folder lives in ``$GRPO_TUI_CACHE/gguf/<sha256 prefix>/`` (default ``~/.cache/grpo-tui``); it is
written under a temporary name and renamed, so a half-written conversion is never used. What cannot
be converted (another architecture, a K-quant MLX cannot read, a SentencePiece vocabulary) is a
``Mistake("model", ...)`` that names the file and what to do.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

from grpo_tui.common.gguf_check import cut_short_sentence, gguf_damage
from grpo_tui.protocol.layout import cache_dir
from grpo_tui.protocol.outcome import Mistake

# bump when the conversion's output changes, so an old cached folder is not reused
CONVERTER_VERSION = 1

ARCHITECTURES = ("llama", "mistral", "qwen2", "qwen3")
# llama.cpp's converter permutes Q/K rows only for the llama family (LlamaModel.permute)
PERMUTED = ("llama", "mistral")

LAYER_NAMES = {
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "attn_q_norm": "self_attn.q_norm",
    "attn_k_norm": "self_attn.k_norm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
TOP_NAMES = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}

# llama.cpp's pre-tokenizer regexes by ``tokenizer.ggml.pre`` (llama-vocab.cpp), as the Hugging
# Face tokenizer.json files they were derived from write them
_GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
_LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
           r"|\s*[\r\n]+|\s+(?!\S)|\s+")
_QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
          r"|\s*[\r\n]+|\s+(?!\S)|\s+")
PRE_TOKENIZERS = ("gpt-2", "default", "smollm", "starcoder", "refact", "llama-bpe", "llama3", "qwen2",
                  "deepseek-r1-qwen")

# GGUF token types (llama.cpp's llama_token_type)
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6


def cache_root() -> Path:
    return cache_dir("gguf")


def find_file(path: Path) -> Path | None:
    """The GGUF file ``path`` names: the file itself, or the one ``.gguf`` in a folder without a
    ``config.json``; None when ``path`` is not a GGUF model. A folder with several is a mistake."""
    if path.is_file():
        return path if path.suffix.lower() == ".gguf" else None
    if not path.is_dir() or (path / "config.json").exists():
        return None
    found = sorted(p for p in path.glob("*.gguf") if p.is_file())
    if len(found) > 1:
        names = ", ".join(p.name for p in found[:4])
        raise Mistake("model", f"model folder {str(path)!r} holds {len(found)} GGUF files ({names}); "
                               "set model.path to the one to train")
    return found[0] if found else None


def file_hash(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def converted(gguf_file: Path, log: Any = None) -> Path:
    """The cached mlx-lm folder of ``gguf_file``, converting it on first use. ``log`` (a callable
    taking one line) hears where the folder is."""
    key = f"{file_hash(gguf_file)[:24]}-v{CONVERTER_VERSION}"
    folder = cache_root() / key
    if (folder / "config.json").exists():
        if log is not None:
            log(f"GGUF {gguf_file.name}: using the converted mlx-lm folder {folder}")
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{key}-", dir=folder.parent))
    try:
        convert(gguf_file, work)
        (work / "gguf_source.json").write_text(json.dumps({"file": str(gguf_file.resolve()), "sha256_prefix": key}))
        try:
            os.replace(work, folder)
        except OSError:  # another process converted it meanwhile: theirs is as good as ours
            if not (folder / "config.json").exists():
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if log is not None:
        log(f"GGUF {gguf_file.name}: converted to the mlx-lm folder {folder}")
    return folder


# ------------------------------------------------------------------------------------- conversion


def _scalar(value: Any) -> Any:
    """A metadata value as Python: MLX gives numbers as 0-d arrays."""
    if hasattr(value, "item") and getattr(value, "ndim", 1) == 0:
        return value.item()
    if hasattr(value, "tolist"):
        return value.tolist()
    return value


def read(gguf_file: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    import mlx.core as mx

    try:
        weights, metadata = mx.load(str(gguf_file), return_metadata=True)
    except Exception as exc:  # noqa: BLE001 — MLX raises plain runtime errors for what it cannot read
        if (why := gguf_damage(gguf_file)) is not None:  # a copy cut short: not a quantization to change
            raise Mistake("model", cut_short_sentence(gguf_file, why)) from None
        detail = str(exc).splitlines()[0] if str(exc) else exc.__class__.__name__
        raise Mistake("model", f"GGUF file {str(gguf_file)!r} cannot be read by MLX ({detail}); MLX reads "
                               "F32, F16, BF16, Q4_0, Q4_1 and Q8_0 tensors, so re-quantize the model to "
                               "one of those (llama-quantize ... Q8_0) or use its Hugging Face folder") from None
    return weights, {k: _scalar(v) for k, v in metadata.items()}


def unpermute(w: Any, n_heads: int) -> Any:
    """Undo llama.cpp's ``LlamaModel.permute``: rows of each head go from interleaved pairs back to
    the rotate-half layout. Works on packed quantized weights, scales and biases alike (rows)."""
    rows = w.shape[0]
    return w.reshape(n_heads, rows // n_heads // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def model_config(arch: str, meta: dict[str, Any], weights: dict[str, Any], path: Path) -> dict[str, Any]:
    def get(key: str, default: Any = None) -> Any:
        value = meta.get(f"{arch}.{key}", default)
        if value is None:
            raise Mistake("model", f"GGUF file {str(path)!r} lacks the metadata key {arch}.{key}, "
                                   "so its architecture cannot be rebuilt; convert it again with llama.cpp")
        return value

    hidden = int(get("embedding_length"))
    heads = int(get("attention.head_count"))
    vocab = meta.get(f"{arch}.vocab_size") or len(meta.get("tokenizer.ggml.tokens") or []) \
        or int(weights["token_embd.weight"].shape[0])
    config: dict[str, Any] = {
        "architectures": [{"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM",
                           "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM"}[arch]],
        "model_type": arch,
        "hidden_size": hidden,
        "intermediate_size": int(get("feed_forward_length")),
        "num_hidden_layers": int(get("block_count")),
        "num_attention_heads": heads,
        "num_key_value_heads": int(meta.get(f"{arch}.attention.head_count_kv", heads)),
        "head_dim": int(meta.get(f"{arch}.attention.key_length", hidden // heads)),
        "rms_norm_eps": float(f"{float(get('attention.layer_norm_rms_epsilon')):.7g}"),  # float32 in GGUF
        "rope_theta": float(meta.get(f"{arch}.rope.freq_base", 10000.0)),
        "max_position_embeddings": int(meta.get(f"{arch}.context_length", 4096)),
        "vocab_size": int(vocab),
        "tie_word_embeddings": "output.weight" not in weights,
        "torch_dtype": "float32",
    }
    if arch == "qwen2":
        config["attention_bias"] = True
    sliding = meta.get(f"{arch}.attention.sliding_window")
    if sliding:
        config["sliding_window"] = int(sliding)
    scaling = meta.get(f"{arch}.rope.scaling.type")
    if scaling not in (None, "none"):
        factor = float(meta.get(f"{arch}.rope.scaling.factor", 1.0))
        if scaling != "linear":
            raise Mistake("model", f"GGUF file {str(path)!r} uses {scaling!r} RoPE scaling, which this "
                                   "converter does not rebuild; use the model's Hugging Face folder")
        config["rope_scaling"] = {"type": "linear", "factor": factor}
    for key, token in (("bos_token_id", "bos"), ("eos_token_id", "eos")):
        value = meta.get(f"tokenizer.ggml.{token}_token_id")
        if value is not None:
            config[key] = int(value)
    return config


def tensors(arch: str, config: dict[str, Any], weights: dict[str, Any], path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """mlx-lm's weights and the quantization block (None entries dropped)."""
    out: dict[str, Any] = {}
    bits_of: dict[str, int] = {}
    for name, value in weights.items():
        if name == "rope_freqs.weight":
            raise Mistake("model", f"GGUF file {str(path)!r} carries llama 3.1-style RoPE frequency factors "
                                   "(rope_freqs), which this converter does not rebuild; use the model's "
                                   "Hugging Face folder")
        stem, _, kind = name.rpartition(".")
        match = re.fullmatch(r"blk\.(\d+)\.(\w+)", stem)
        if match and match.group(2) in LAYER_NAMES:
            module = f"model.layers.{match.group(1)}.{LAYER_NAMES[match.group(2)]}"
        elif stem in TOP_NAMES:
            module = TOP_NAMES[stem]
        else:
            raise Mistake("model", f"GGUF file {str(path)!r} has a tensor {name!r} that {arch} models do not "
                                   "have in mlx-lm, so it cannot be converted; use the model's Hugging Face folder")
        if arch in PERMUTED and match and match.group(2) in ("attn_q", "attn_k"):
            heads = config["num_attention_heads"] if match.group(2) == "attn_q" else config["num_key_value_heads"]
            value = unpermute(value, heads)
        out[f"{module}.{kind}"] = value
        if kind == "scales":
            packed = weights[f"{stem}.weight"]
            # MLX keeps GGUF's group of 32 values per scale
            bits_of[module] = packed.shape[-1] * 32 // (value.shape[-1] * 32)
    quantization: dict[str, Any] = {}
    if bits_of:
        counts: dict[int, int] = {}
        for bits in bits_of.values():
            counts[bits] = counts.get(bits, 0) + 1
        common = max(counts, key=lambda b: counts[b])
        quantization = {"group_size": 32, "bits": common, "mode": "affine"}
        for module, bits in sorted(bits_of.items()):
            if bits != common:
                quantization[module] = {"group_size": 32, "bits": bits}
    return out, quantization


def convert(gguf_file: Path, out: Path) -> None:
    """Write the mlx-lm folder of ``gguf_file`` into the existing folder ``out``."""
    import mlx.core as mx

    weights, meta = read(gguf_file)
    arch = str(meta.get("general.architecture", ""))
    if not arch:
        raise Mistake("model", f"GGUF file {str(gguf_file)!r} names no general.architecture, so it is not a "
                               "model llama.cpp wrote; convert the model again with llama.cpp")
    if arch not in ARCHITECTURES:
        raise Mistake("model", f"GGUF file {str(gguf_file)!r} is a {arch!r} model; GGUF "
                               f"conversion supports {', '.join(ARCHITECTURES)}, so use its Hugging Face "
                               "folder instead")
    config = model_config(arch, meta, weights, gguf_file)
    converted_weights, quantization = tensors(arch, config, weights, gguf_file)
    if quantization:
        config["quantization"] = quantization
        config["quantization_config"] = quantization
    write_tokenizer(meta, out, gguf_file)
    mx.save_safetensors(str(out / "model.safetensors"), converted_weights, metadata={"format": "mlx"})
    (out / "config.json").write_text(json.dumps(config, indent=2))


# -------------------------------------------------------------------------------------- tokenizer


def pre_tokenizer(pre: str, path: Path) -> Any:
    from tokenizers import Regex, pre_tokenizers

    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)

    def split(regex: str) -> Any:
        return pre_tokenizers.Split(Regex(regex), behavior="isolated", invert=False)

    if pre in ("gpt-2", "default"):
        return pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    if pre in ("smollm", "starcoder", "refact"):
        return pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    if pre in ("llama-bpe", "llama3"):
        return pre_tokenizers.Sequence([split(_LLAMA3), byte_level])
    if pre in ("qwen2", "deepseek-r1-qwen"):
        return pre_tokenizers.Sequence([split(_QWEN2), byte_level])
    raise Mistake("model", f"GGUF file {str(path)!r} names the pre-tokenizer {pre!r}, which this converter "
                           f"does not know (it knows {', '.join(PRE_TOKENIZERS)}); use the model's Hugging "
                           "Face folder")


def build_tokenizer(meta: dict[str, Any], path: Path) -> Any:
    """A ``tokenizers.Tokenizer`` equal to the one llama.cpp's converter read."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, processors

    kind = meta.get("tokenizer.ggml.model")
    if kind != "gpt2":
        raise Mistake("model", f"GGUF file {str(path)!r} has a {kind!r} tokenizer; only byte-level BPE "
                               "('gpt2': SmolLM, Qwen, Llama 3) is rebuilt, so use the model's Hugging Face folder")
    tokens: list[str] = list(meta["tokenizer.ggml.tokens"])
    merges = [tuple(m.split(" ", 1)) for m in meta.get("tokenizer.ggml.merges") or []]
    types = list(meta.get("tokenizer.ggml.token_type") or [NORMAL] * len(tokens))
    vocab = {tok: i for i, tok in enumerate(tokens)}
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False, byte_fallback=False))
    tokenizer.pre_tokenizer = pre_tokenizer(str(meta.get("tokenizer.ggml.pre", "default")), path)
    tokenizer.decoder = decoders.ByteLevel()
    added = [AddedToken(tokens[i], special=types[i] == CONTROL, normalized=False)
             for i in range(len(tokens)) if types[i] in (CONTROL, USER_DEFINED)]
    if added:
        tokenizer.add_tokens(added)
    bos = meta.get("tokenizer.ggml.bos_token_id")
    if meta.get("tokenizer.ggml.add_bos_token") and bos is not None:
        name = tokens[int(bos)]
        tokenizer.post_processor = processors.TemplateProcessing(
            single=f"{name}:0 $A:0", pair=f"{name}:0 $A:0 {name}:1 $B:1", special_tokens=[(name, int(bos))])
    else:
        tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    return tokenizer


def write_tokenizer(meta: dict[str, Any], out: Path, path: Path) -> None:
    tokenizer = build_tokenizer(meta, path)
    tokenizer.save(str(out / "tokenizer.json"))
    tokens = meta["tokenizer.ggml.tokens"]

    def token(key: str) -> str | None:
        value = meta.get(f"tokenizer.ggml.{key}_token_id")
        return tokens[int(value)] if value is not None and 0 <= int(value) < len(tokens) else None

    config: dict[str, Any] = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "add_bos_token": bool(meta.get("tokenizer.ggml.add_bos_token", False)),
        "add_eos_token": bool(meta.get("tokenizer.ggml.add_eos_token", False)),
        "clean_up_tokenization_spaces": False,
        "model_max_length": int(meta.get(f"{meta.get('general.architecture')}.context_length", 4096)),
    }
    for key in ("bos", "eos", "unk"):
        if token(key) is not None:
            config[f"{key}_token"] = token(key)
    pad = token("padding")
    if pad is not None:
        config["pad_token"] = pad
    template = meta.get("tokenizer.chat_template")
    if template:
        config["chat_template"] = template
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2, ensure_ascii=False))
