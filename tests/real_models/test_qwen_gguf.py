"""The realistic Qwen3 folder (the real 151,643-rank Qwen BPE, Qwen3's special tokens and chat
template) written as llama.cpp's GGUF and loaded back through ``model.path``: the same logits and a
tokenizer rebuilt from the metadata that encodes, decodes and renders chats as the original."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
from mlx_lm import load as mlx_load
from transformers import AutoTokenizer

from grpo_tui.protocol.config import ModelConfig
from grpo_tui.worker.engine.models import model_io, model_source
from tests.helpers.gguf_files import TEXTS, write_gguf

CHATS = [
    [{"role": "user", "content": "What is 17+25? Réponds en chiffres."}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "東京は？"},
     {"role": "assistant", "content": "<think>\nThe capital.\n</think>\n\nTokyo 🗼"}],
]


def test_the_real_qwen_vocabulary_round_trips_through_gguf(qwen_bpe_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("GRPO_TUI_CACHE", str(tmp_path / "cache"))
    file = tmp_path / "qwen3.gguf"
    write_gguf(qwen_bpe_dir, file, "qwen2")
    model, tokenizer = model_io.load(ModelConfig(path=str(file)))
    original, source = mlx_load(str(qwen_bpe_dir))
    probe = mx.array([source.encode("Hello 123 <think> 東京 <|im_end|>")])
    model.eval(), original.eval()
    np.testing.assert_allclose(np.array(model(probe)), np.array(original(probe)), rtol=1e-5, atol=1e-5)

    rebuilt = AutoTokenizer.from_pretrained(str(model_source.resolve(str(file))))
    hf = AutoTokenizer.from_pretrained(str(qwen_bpe_dir))
    for text in TEXTS + ["<tool_call>\n{\"name\": \"add\"}\n</tool_call><|endoftext|>"]:
        ids = hf.encode(text)
        assert rebuilt.encode(text) == ids, text
        assert rebuilt.decode(ids) == hf.decode(ids) == text
    for chat in CHATS:
        for generation_prompt in (False, True):
            assert rebuilt.apply_chat_template(chat, add_generation_prompt=generation_prompt) == \
                hf.apply_chat_template(chat, add_generation_prompt=generation_prompt)
    assert tokenizer.eos_token_id == source.eos_token_id
