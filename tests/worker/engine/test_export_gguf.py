"""Back to llama.cpp: the final checkpoint of a GGUF-born run (full fine-tuning, or LoRA on a 4-bit
file) exports to a GGUF file with the source file's metadata, and that file, loaded back through
``model.path``, gives the checkpoint's logits."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest

from grpo_tui.protocol.config import ModelConfig, load_config
from grpo_tui.protocol.outcome import Mistake
from grpo_tui.worker.engine.models import export_gguf
from grpo_tui.worker.engine.models import model_io
from grpo_tui.worker.engine.trainer import MlxTrainer
from tests.helpers.arch_models import LORA, step_config
from tests.helpers.gguf_files import build_model, write_gguf

PROBE = mx.array([[1, 7, 30, 31, 9, 82, 92, 5, 250, 301, 17, 3]])


def logits(model) -> np.ndarray:
    model.eval()
    return np.array(model(PROBE).astype(mx.float32))


@pytest.mark.parametrize("mode", ["full", "lora"])
def test_a_gguf_born_checkpoint_exports_to_gguf_and_loads_back_with_the_same_logits(mode, tmp_path, monkeypatch):
    monkeypatch.setenv("GRPO_TUI_CACHE", str(tmp_path / "cache"))
    original = build_model(tmp_path / "hf", "llama", "smollm")
    file = tmp_path / "model.gguf"
    write_gguf(original, file, "smollm", "F32" if mode == "full" else "Q4_1", embedding_qtype=None)
    config = load_config(step_config(tmp_path / "run", file, LORA if mode == "lora" else ""))
    trainer = MlxTrainer(config, log=lambda level, message: None)
    start = logits(trainer.policy.model)
    assert trainer.train_step(1).metrics.gradients_applied
    final = tmp_path / "final"
    final.mkdir()
    trainer.save_model(final)
    trained = logits(trainer.policy.model)
    assert np.abs(trained - start).max() > 1e-4

    exported = export_gguf.export(final, tmp_path / "out" / "trained.gguf", dtype="f32")
    back, _ = model_io.load(ModelConfig(path=str(exported)))
    # full: the same float32 weights; LoRA: the 4-bit base dequantized plus the fused update
    tolerance = 1e-5 if mode == "full" else 1e-3
    np.testing.assert_allclose(logits(back), trained, rtol=tolerance, atol=tolerance)
    _, metadata = mx.load(str(exported), return_metadata=True)
    _, source = mx.load(str(file), return_metadata=True)
    assert metadata["tokenizer.ggml.merges"] == source["tokenizer.ggml.merges"]
    assert metadata["tokenizer.chat_template"] == source["tokenizer.chat_template"]
    assert export_gguf.main([str(final), str(tmp_path / "half.gguf")]) == 0  # f16, the default
    half, _ = model_io.load(ModelConfig(path=str(tmp_path / "half.gguf")))
    np.testing.assert_allclose(logits(half), trained, rtol=2e-2, atol=2e-2)


def test_a_checkpoint_not_born_from_gguf_asks_for_the_source_file(tmp_path):
    (tmp_path / "ckpt").mkdir()
    with pytest.raises(Mistake, match=r"does not come from a GGUF file .*--source"):
        export_gguf.export(tmp_path / "ckpt", tmp_path / "x.gguf")
