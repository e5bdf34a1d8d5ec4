"""GGUF files written as llama.cpp's ``convert_hf_to_gguf.py`` writes them, from small random models
with a byte-level BPE tokenizer trained here, so nothing is downloaded.

What the converter does and this copies: Q and K rows of the llama family permuted
(``LlamaModel.permute``); qwen2/qwen3 unpermuted; norms kept F32, 2-D weights quantized with
``gguf.quants`` (llama.cpp's own reference quantizer); the vocabulary as ``tokenizer.ggml.tokens``
in id order, types (added special tokens CONTROL, other added tokens USER_DEFINED), merges as
``"a b"`` strings, the special ids and the chat template.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from tests.helpers import arch_models

CHAT_TEMPLATE = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CORPUS = [
    "What is 12+345? The answer is 357. Answer with only the final number.",
    "The capital of France is Paris. Die Hauptstadt von Deutschland ist Berlin.",
    "Le café est très chaud ; l'été arrive. ¿Dónde está la biblioteca? Ça va très bien.",
    "日本語のテキストです。東京は日本の首都です。中文文本：北京是中国的首都。",
    "Привет, как дела? Всё хорошо. Ελληνικά γράμματα. مرحبا بالعالم",
    "def add(a, b):\n    return a + b  # 2024-01-31, 3.14159, 1,000,000 😀🚀\n\n\tTabs and  spaces",
    "I'm sure they'll say it's fine; we've done it and you'd agree. DON'T SHOUT.",
] * 20
# what the tokenizer tests encode: multilingual text, digits, whitespace runs, emoji, chat markers
TEXTS = [
    "Hello world! What is 1234567+89? Answer: 1234656.",
    "Ça coûte 12,50 € — très cher. Größe: 3 Äpfel. ñandú",
    "東京タワーは333メートルです。我有3只猫。",
    "Привет мир 2025 года; Ελλάδα; שלום; नमस्ते 🙂👍🏽",
    "  leading spaces\n\nnew lines\ttabs   and trailing   ",
    "<|im_start|>user\nWhat is 7+8?<|im_end|>\n<|im_start|>assistant\n15<|im_end|>",
    "I'VE seen it; they'll go, we'd stay. x=10**9, 0.5e-3",
]


def train_tokenizer(pre: str, vocab_size: int = 400) -> Any:
    """A byte-level BPE like the model families': SmolLM's (individual digits, GPT-2 regex) or
    Qwen2's (its split regex, NFC)."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

    tokenizer = Tokenizer(models.BPE())
    if pre == "smollm":
        tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    else:
        from grpo_tui.worker.engine.models.gguf import _QWEN2

        tokenizer.normalizer = normalizers.NFC()
        tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(_QWEN2), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tokenizer.train_from_iterator(CORPUS, trainer)
    return tokenizer


def write_tokenizer_files(tokenizer: Any, folder: Path) -> None:
    tokenizer.save(str(folder / "tokenizer.json"))
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
              "bos_token": "<|im_start|>", "add_bos_token": False, "chat_template": CHAT_TEMPLATE,
              "clean_up_tokenization_spaces": False}
    (folder / "tokenizer_config.json").write_text(json.dumps(config))


def build_model(folder: Path, model_type: str, pre: str, seed: int = 0) -> Path:
    """A random ``model_type`` mlx-lm folder with a trained byte-level BPE tokenizer."""
    tokenizer = train_tokenizer(pre)
    overrides: dict[str, Any] = {"vocab_size": tokenizer.get_vocab_size(), "eos_token_id": 2, "bos_token_id": 1}
    if model_type == "llama":  # plain RoPE: llama 3.1's frequency factors are refused (tested apart)
        overrides.update(rope_scaling=None, tie_word_embeddings=False, rope_theta=10000.0)
    arch_models.build(folder, model_type, seed=seed, **overrides)
    for name in ("special_tokens_map.json", "generation_config.json"):
        (folder / name).unlink(missing_ok=True)
    write_tokenizer_files(tokenizer, folder)
    return folder


def permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp's ``LlamaModel.permute``."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


HF_TO_GGUF = {
    "input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm", "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
    "self_attn.q_norm": "attn_q_norm", "self_attn.k_norm": "attn_k_norm", "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down",
}


def gguf_name(name: str) -> str:
    top = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
           "lm_head.weight": "output.weight"}
    if name in top:
        return top[name]
    _, _, layer, rest = name.split(".", 3)
    module, kind = rest.rsplit(".", 1)
    return f"blk.{layer}.{HF_TO_GGUF[module]}.{kind}"


def write_gguf(model_folder: Path, out: Path, pre: str, qtype: str = "F32", embedding_qtype: str | None = None,
               arch: str | None = None) -> dict[str, np.ndarray]:
    """``model_folder`` as llama.cpp's GGUF (``qtype``: F32, F16, Q8_0, Q4_0, Q4_1 for 2-D weights,
    ``embedding_qtype`` for the embedding when it differs). Returns the float weights the file
    holds, by mlx-lm name (dequantized with ``gguf.quants``, unpermuted): the reference."""
    import gguf
    import mlx.core as mx

    config = json.loads((model_folder / "config.json").read_text())
    tok = json.loads((model_folder / "tokenizer.json").read_text())
    tok_config = json.loads((model_folder / "tokenizer_config.json").read_text())
    arch = arch or config["model_type"]
    writer = gguf.GGUFWriter(str(out), arch)
    writer.add_name("test model")
    writer.add_context_length(config["max_position_embeddings"])
    writer.add_embedding_length(config["hidden_size"])
    writer.add_block_count(config["num_hidden_layers"])
    writer.add_feed_forward_length(config["intermediate_size"])
    writer.add_head_count(config["num_attention_heads"])
    writer.add_head_count_kv(config["num_key_value_heads"])
    writer.add_layer_norm_rms_eps(config["rms_norm_eps"])
    writer.add_rope_freq_base(config["rope_theta"])
    head_dim = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    if config.get("head_dim"):
        writer.add_key_length(head_dim)
        writer.add_value_length(head_dim)
    writer.add_rope_dimension_count(head_dim)
    writer.add_vocab_size(config["vocab_size"])
    writer.add_file_type(gguf.LlamaFileType.ALL_F32 if qtype == "F32" else getattr(gguf.LlamaFileType, f"MOSTLY_{qtype}"))

    vocab = tok["model"]["vocab"]
    added = {t["id"]: t for t in tok["added_tokens"]}
    by_id = {i: s for s, i in vocab.items()} | {i: t["content"] for i, t in added.items()}
    # ids past the vocabulary up to the embedding's rows are llama.cpp's [PAD<i>] UNUSED tokens
    tokens = [by_id.get(i, f"[PAD{i}]") for i in range(config["vocab_size"])]
    types = [(gguf.TokenType.CONTROL if added[i]["special"] else gguf.TokenType.USER_DEFINED) if i in added
             else gguf.TokenType.NORMAL if i in by_id else gguf.TokenType.UNUSED for i in range(len(tokens))]
    merges = [m if isinstance(m, str) else " ".join(m) for m in tok["model"]["merges"]]
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre(pre)
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    if tok_config.get("bos_token"):
        writer.add_bos_token_id(tokens.index(tok_config["bos_token"]))
    writer.add_eos_token_id(tokens.index(tok_config["eos_token"]))
    writer.add_pad_token_id(tokens.index(tok_config["pad_token"]))
    writer.add_add_bos_token(False)
    template = tok_config.get("chat_template")
    if template is None and (model_folder / "chat_template.jinja").exists():
        template = (model_folder / "chat_template.jinja").read_text()
    writer.add_chat_template(template)

    weights = {k: np.array(v.astype(mx.float32)) for k, v in mx.load(str(model_folder / "model.safetensors")).items()}
    reference: dict[str, np.ndarray] = {}
    for name, value in weights.items():
        data = value
        if arch == "llama" and (".q_proj." in name or ".k_proj." in name):
            heads = config["num_attention_heads"] if ".q_proj." in name else config["num_key_value_heads"]
            data = permute(value, heads)
        kind = qtype if value.ndim == 2 else "F32"
        if name == "model.embed_tokens.weight" and embedding_qtype:
            kind = embedding_qtype
        if kind == "F32":
            writer.add_tensor(gguf_name(name), data.astype(np.float32))
            reference[name] = value
            continue
        if kind == "F16":
            writer.add_tensor(gguf_name(name), data.astype(np.float16))
            reference[name] = value.astype(np.float16).astype(np.float32)
            continue
        q = getattr(gguf.GGMLQuantizationType, kind)
        packed = gguf.quants.quantize(data.astype(np.float32), q)
        writer.add_tensor(gguf_name(name), packed, raw_dtype=q)
        back = gguf.quants.dequantize(packed, q).reshape(value.shape)
        if arch == "llama" and (".q_proj." in name or ".k_proj." in name):
            heads = config["num_attention_heads"] if ".q_proj." in name else config["num_key_value_heads"]
            back = back.reshape(heads, back.shape[0] // heads // 2, 2, -1).swapaxes(1, 2).reshape(value.shape)
        reference[name] = back.astype(np.float32)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return reference
