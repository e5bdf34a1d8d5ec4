"""GGUF files as ``model.path``: written here as llama.cpp's converter writes them (tests.helpers.gguf_files),
loaded through the worker's model loading, they give the original model's logits; the tokenizer
rebuilt from the metadata encodes, decodes and renders the chat template as the original; a file
that cannot be converted is one sentence; quantized files train with LoRA or dequantized, through
the real worker."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest
from mlx.utils import tree_flatten
from mlx_lm import load as mlx_load

from grpo_tui.protocol.config import ModelConfig
from grpo_tui.protocol.outcome import Exit, Mistake
from grpo_tui.worker.engine.models import gguf, model_io, model_source
from tests.helpers.arch_models import LORA, step_config
from tests.conftest import ROOT
from tests.helpers.gguf_files import TEXTS, build_model, write_gguf

PROBE = mx.array([[1, 7, 30, 31, 9, 82, 92, 5, 250, 301, 17, 3]])
FAMILIES = [("llama", "smollm"), ("qwen2", "qwen2"), ("qwen3", "qwen2")]


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("GRPO_TUI_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def logits(model) -> np.ndarray:
    model.eval()
    return np.array(model(PROBE).astype(mx.float32))


@pytest.mark.parametrize("model_type,pre", FAMILIES)
def test_a_float_gguf_file_as_model_path_gives_the_original_logits(model_type, pre, tmp_path):
    original = build_model(tmp_path / "hf", model_type, pre)
    file = tmp_path / "model-f32.gguf"
    write_gguf(original, file, pre)
    model, tokenizer = model_io.load(ModelConfig(path=str(file)))
    expected, _ = mlx_load(str(original))
    np.testing.assert_allclose(logits(model), logits(expected), rtol=1e-5, atol=1e-5)
    folder = model_source.resolve(str(file))
    assert folder.parent == tmp_path / "cache" / "gguf"
    assert json.loads((folder / "config.json").read_text())["model_type"] == model_type


@pytest.mark.parametrize("qtype,embedding", [("Q8_0", None), ("Q4_0", None), ("Q4_1", "Q8_0")])
def test_a_quantized_gguf_file_stays_quantized_and_gives_the_logits_of_its_dequantized_weights(qtype, embedding, tmp_path):
    original = build_model(tmp_path / "hf", "llama", "smollm")
    file = tmp_path / f"model-{qtype}.gguf"
    reference_weights = write_gguf(original, file, "smollm", qtype, embedding_qtype=embedding)
    model, _ = model_io.load(ModelConfig(path=str(file), lora=None, dequantize=True))
    quantized, _ = mlx_load(str(model_source.resolve(str(file))))
    assert type(quantized.model.layers[0].self_attn.q_proj).__name__ == "QuantizedLinear"
    assert type(quantized.model.embed_tokens).__name__ == "QuantizedEmbedding"
    expected, _ = mlx_load(str(original))
    expected.load_weights([(k, mx.array(v)) for k, v in reference_weights.items()])
    # the un-permuted Q/K scales and biases are what make these agree; MLX's quantized matmul
    # rounds differently from the float one, hence the tolerance
    np.testing.assert_allclose(logits(quantized), logits(expected), rtol=2e-3, atol=2e-3)
    # dequantized in float32: the same weights as the reference, to float32 rounding
    np.testing.assert_allclose(logits(model), logits(expected), rtol=1e-5, atol=1e-5)
    assert all(v.dtype == mx.float32 for v in dict(tree_flatten(model.parameters())).values())


@pytest.mark.parametrize("pre", ["smollm", "qwen2"])
def test_the_tokenizer_rebuilt_from_gguf_metadata_encodes_decodes_and_renders_the_chat_as_the_original(pre, tmp_path):
    from transformers import AutoTokenizer

    original = build_model(tmp_path / "hf", "qwen2" if pre == "qwen2" else "llama", pre)
    file = tmp_path / "model.gguf"
    write_gguf(original, file, pre)
    rebuilt = AutoTokenizer.from_pretrained(str(model_source.resolve(str(file))))
    source = AutoTokenizer.from_pretrained(str(original))
    for text in TEXTS:
        ids = source.encode(text)
        assert rebuilt.encode(text) == ids, text
        assert rebuilt.decode(ids) == source.decode(ids) == text
        assert rebuilt.decode(ids, skip_special_tokens=True) == source.decode(ids, skip_special_tokens=True)
    chat = [{"role": "user", "content": "What is 17+25? Réponds en chiffres."}, {"role": "assistant", "content": "42"}]
    assert rebuilt.apply_chat_template(chat, tokenize=False) == source.apply_chat_template(chat, tokenize=False)
    assert rebuilt.apply_chat_template(chat, add_generation_prompt=True) == source.apply_chat_template(
        chat, add_generation_prompt=True)
    assert rebuilt.eos_token_id == source.convert_tokens_to_ids("<|im_end|>")
    assert rebuilt.decode(rebuilt.encode("<|im_start|>")) == "<|im_start|>"


def test_a_folder_holding_one_gguf_file_is_a_model_and_the_conversion_is_cached(tmp_path):
    original = build_model(tmp_path / "hf", "qwen3", "qwen2")
    (tmp_path / "ollama").mkdir()
    write_gguf(original, tmp_path / "ollama" / "model.gguf", "qwen2")
    lines: list[str] = []
    first = gguf.converted(tmp_path / "ollama" / "model.gguf", lines.append)
    assert model_source.resolve(str(tmp_path / "ollama")) == first
    assert gguf.converted(tmp_path / "ollama" / "model.gguf", lines.append) == first
    assert lines == [f"GGUF model.gguf: converted to the mlx-lm folder {first}",
                     f"GGUF model.gguf: using the converted mlx-lm folder {first}"]
    assert [p.name for p in first.parent.iterdir()] == [first.name]  # no half-written folder left


def test_what_cannot_be_converted_is_one_sentence_naming_the_file(tmp_path):
    original = build_model(tmp_path / "hf", "llama", "smollm")
    write_gguf(original, tmp_path / "gemma.gguf", "smollm", arch="gemma2")
    with pytest.raises(Mistake, match=r"'gemma2' model; GGUF conversion supports llama, mistral, qwen2, qwen3") as caught:
        model_source.resolve(str(tmp_path / "gemma.gguf"))
    assert caught.value.kind == "model"
    write_gguf(original, tmp_path / "odd.gguf", "falcon")
    with pytest.raises(Mistake, match=r"odd.gguf.*pre-tokenizer 'falcon'"):
        model_source.resolve(str(tmp_path / "odd.gguf"))
    two = tmp_path / "two"
    two.mkdir()
    for name in ("a.gguf", "b.gguf"):
        (two / name).write_bytes((tmp_path / "odd.gguf").read_bytes())
    with pytest.raises(Mistake, match=r"holds 2 GGUF files \(a.gguf, b.gguf\); set model.path to the one to train"):
        model_source.resolve(str(two))
    write_gguf(original, tmp_path / "q5.gguf", "smollm", "Q5_0")  # a quantization MLX does not read
    with pytest.raises(Mistake, match=r"q5.gguf.*cannot be read by MLX .*re-quantize the model"):
        model_source.resolve(str(tmp_path / "q5.gguf"))
    (tmp_path / "broken.gguf").write_bytes((tmp_path / "odd.gguf").read_bytes()[:5000])  # a cut download
    with pytest.raises(Mistake, match=r"broken.gguf' is cut short \(5,000 bytes, inside its header\); copy or download it again"):
        model_source.resolve(str(tmp_path / "broken.gguf"))


def run_worker(config: Path, cache: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "GRPO_TUI_CACHE": str(cache), "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "grpo_tui.worker", str(config), "--plain"], env=env,
                          capture_output=True, text=True, timeout=600, cwd=ROOT)


@pytest.mark.parametrize("mode", ["lora", "dequantize"])
def test_a_quantized_gguf_file_trains_through_the_worker_with_lora_or_dequantized(mode, tmp_path, cache):
    original = build_model(tmp_path / "hf", "llama", "smollm")
    file = tmp_path / "model-q4_1.gguf"
    write_gguf(original, file, "smollm", "Q4_1", embedding_qtype="Q8_0")
    config = step_config(tmp_path / "run", file)
    text = config.read_text().replace("[training]", "[training]\nmax_steps = 1", 1)
    if mode == "lora":
        text += LORA
    else:
        text = text.replace(f'path = "{file}"', f'path = "{file}"\ndequantize = true', 1)
    config.write_text(text)
    done = run_worker(config, cache)
    assert done.returncode == Exit.DONE, done.stderr[-3000:]
    folder = model_source.resolve(str(file))
    assert f"converted to the mlx-lm folder {folder}" in done.stdout + done.stderr  # the log says where
    final = config.parent / "run" / "final"
    if mode == "lora":
        adapter = json.loads((final / "adapter_config.json").read_text())
        assert adapter["model"] == str(folder)
        model, _ = mlx_load(adapter["model"], adapter_path=str(final))
    else:
        saved = json.loads((final / "config.json").read_text())
        assert "quantization" not in saved and saved["torch_dtype"] == "float32"
        model, _ = mlx_load(str(final))
        assert type(model.model.layers[0].self_attn.q_proj).__name__ == "Linear"
    assert np.isfinite(logits(model)).all()
