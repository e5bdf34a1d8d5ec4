"""QLoRA: LoRA on 4- and 8-bit bases (made with mlx-lm's own converter) trains, and what a run leaves
loads with stock mlx-lm: the adapters on the quantized base, and a model fused by ``mlx_lm fuse``."""

from __future__ import annotations

import subprocess
import sys

import mlx.core as mx
import numpy as np
import pytest
from mlx_lm import generate, load as mlx_load

from grpo_tui.protocol.config import ConfigError, load_config
from grpo_tui.worker.engine.trainer import MlxTrainer
from tests.helpers.arch_models import LORA, build, quantize, step_config

PROBE = mx.array([[1, 7, 30, 31, 9, 82, 92, 5]])


@pytest.mark.parametrize("bits", [4, 8])
def test_lora_on_a_quantized_base_trains_and_its_adapters_and_fused_model_load_in_mlx_lm(bits, tmp_path):
    base = quantize(build(tmp_path / "float", "qwen3"), tmp_path / f"q{bits}", bits)
    trainer = MlxTrainer(load_config(step_config(tmp_path, base, LORA)), log=lambda level, message: None)
    assert type(trainer.policy.model.model.layers[0].self_attn.q_proj.linear).__name__ == "QuantizedLinear"
    start = np.array(trainer.policy.model(PROBE))
    for step in (1, 2):
        assert trainer.train_step(step).metrics.gradients_applied
    final = tmp_path / "final"
    final.mkdir()
    trainer.save_model(final)
    trainer.policy.model.eval()
    trained = np.array(trainer.policy.model(PROBE))
    assert np.abs(trained - start).max() > 1e-4  # the adapters moved the outputs

    adapted, tokenizer = mlx_load(str(base), adapter_path=str(final))
    np.testing.assert_allclose(np.array(adapted(PROBE)), trained, rtol=1e-4, atol=1e-4)

    for fused_dir, flags in ((tmp_path / "fused", []), (tmp_path / "fused-float", ["--dequantize"])):
        done = subprocess.run([sys.executable, "-m", "mlx_lm", "fuse", "--model", str(base), "--adapter-path",
                               str(final), "--save-path", str(fused_dir), *flags], capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        fused, tokenizer = mlx_load(str(fused_dir))
        assert isinstance(generate(fused, tokenizer, "What is 1+1?", max_tokens=4), str)
    # base dequantized + the update: the trained model's outputs (re-quantizing, the default, rounds them)
    np.testing.assert_allclose(np.array(fused(PROBE)), trained, rtol=1e-3, atol=1e-3)

def test_full_fine_tuning_a_quantized_base_stops_at_load_and_says_to_use_model_lora(tmp_path):
    base = quantize(build(tmp_path / "float", "qwen3"), tmp_path / "q4", 4)
    with pytest.raises(ConfigError, match=r"model.lora: .* is a 4-bit quantized model.*add a \[model.lora\] table"):
        MlxTrainer(load_config(step_config(tmp_path, base)), log=lambda level, message: None)
