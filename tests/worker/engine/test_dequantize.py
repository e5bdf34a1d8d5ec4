"""``model.dequantize``: a quantized model (mlx-community style, made by mlx-lm's converter) is fully
fine-tuned as float weights: every weight trains, the memory estimate counts the float weights, and
the checkpoint is a float model that stock mlx-lm loads."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import mlx.core as mx
import numpy as np
import pytest
from mlx.utils import tree_flatten
from mlx_lm import load as mlx_load

from grpo_tui.protocol.config import ModelConfig, load_config
from grpo_tui.worker.engine.models import memory_fit, model_io, model_source
from tests.helpers.arch_models import build, quantize, step_config
from tests.conftest import ROOT

PROBE = mx.array([[1, 7, 30, 31, 9, 82, 92, 5]])


@pytest.mark.parametrize("dtype,itemsize", [(None, 4), ("bfloat16", 2)])
def test_a_dequantized_model_is_all_float_all_trainable_and_counted_as_such(dtype, itemsize, tmp_path):
    floats = build(tmp_path / "float", "qwen3")
    base = quantize(floats, tmp_path / "q4", 4)
    model, _ = model_io.load(ModelConfig(path=str(base), dequantize=True, dtype=dtype))
    quantized, _ = mlx_load(str(base))
    reference, _ = mlx_load(str(floats))
    values = dict(tree_flatten(model.parameters()))
    assert {v.dtype for v in values.values()} == {mx.float32 if dtype is None else mx.bfloat16}
    assert sum(v.size for _, v in tree_flatten(model.trainable_parameters())) == sum(v.size for v in values.values())
    assert sum(v.size for v in values.values()) == sum(v.size for _, v in tree_flatten(reference.parameters()))
    # the count read from the file headers before loading (the engine plan's small-model choice)
    assert model_source.parameter_count(str(base), dequantized=True) == sum(v.size for v in values.values())
    assert model_source.parameter_count(str(base)) < sum(v.size for v in values.values()) // 2
    if dtype is None:  # the quantized model's own function, now in float
        quantized.eval(), model.eval()
        np.testing.assert_allclose(np.array(model(PROBE)), np.array(quantized(PROBE)), rtol=1e-3, atol=1e-3)
    config = load_config(step_config(tmp_path / "run", base))
    shape = memory_fit.StepShape.of(model, config, prompt_tokens=16)
    assert shape.parameters == shape.trainable == sum(v.size for v in values.values())
    assert shape.bytes_per_value == itemsize


def test_full_fine_tuning_a_dequantized_model_through_the_worker_trains_every_weight_and_saves_a_float_model(tmp_path):
    base = quantize(build(tmp_path / "float", "qwen3"), tmp_path / "q4", 4)
    config = step_config(tmp_path / "run", base)
    text = config.read_text().replace("[training]", "[training]\nmax_steps = 1\nmemory_limit_gb = 64.0", 1)
    config.write_text(text.replace(f'path = "{base}"', f'path = "{base}"\ndequantize = true', 1))
    done = subprocess.run([sys.executable, "-m", "grpo_tui.worker", str(config), "--plain"], capture_output=True,
                          text=True, timeout=600, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "memory_limit_gb = 64" in done.stdout  # the estimate ran on the float model
    final = config.parent / "run" / "final"
    saved = json.loads((final / "config.json").read_text())
    assert "quantization" not in saved and saved["torch_dtype"] == "float32"
    trained, _ = mlx_load(str(final))
    start, _ = model_io.load(ModelConfig(path=str(base), dequantize=True))
    assert type(trained.model.layers[0].self_attn.q_proj).__name__ == "Linear"
    moved = {name for name, value in tree_flatten(trained.parameters())
             if not np.array_equal(np.array(value), np.array(dict(tree_flatten(start.parameters()))[name]))}
    # the quantized weights train too, not only the norms a quantized model would leave trainable
    assert {"model.layers.0.self_attn.q_proj.weight", "model.layers.1.mlp.down_proj.weight"} <= moved
