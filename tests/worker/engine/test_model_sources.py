"""Model ids through the Hugging Face cache with no network, and the one-sentence errors a user
gets for a missing model, an architecture mlx-lm lacks, and full fine-tuning of a quantized model."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from grpo_tui.protocol.config import ConfigError, LoraConfig, ModelConfig
from tests.helpers.arch_models import build, quantize
from tests.conftest import ROOT

REVISION = "0123456789abcdef0123456789abcdef01234567"


def hub_cache(home: Path, repo: str, model: Path) -> Path:
    """A Hugging Face cache under ``home`` holding ``model`` as ``repo``'s main revision."""
    folder = home / "hub" / f"models--{repo.replace('/', '--')}"
    snapshot = folder / "snapshots" / REVISION
    shutil.copytree(model, snapshot)
    (folder / "refs").mkdir(parents=True)
    (folder / "refs" / "main").write_text(REVISION)
    return snapshot


def run_offline(home: Path, code: str) -> subprocess.CompletedProcess:
    # A fresh process: huggingface_hub reads HF_HOME and HF_HUB_OFFLINE once, at import.
    env = {**os.environ, "HF_HOME": str(home), "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    env.pop("HF_HUB_CACHE", None)
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)


LOAD = """
from grpo_tui.protocol.config import ModelConfig
from grpo_tui.worker.engine.models.model_source import resolve, ModelSourceError
from mlx_lm import load, generate
try:
    folder = resolve({repo!r})
except ModelSourceError as exc:
    print("ERROR", exc)
else:
    model, tok = load(str(folder))
    print("LOADED", folder, type(model).__module__, len(generate(model, tok, "1+1=", max_tokens=3)) >= 0)
"""


def test_a_model_id_loads_from_the_hub_cache_offline(tmp_path):
    home = tmp_path / "hf"
    snapshot = hub_cache(home, "someorg/tiny-qwen3", build(tmp_path / "m", "qwen3"))
    result = run_offline(home, LOAD.format(repo="someorg/tiny-qwen3"))
    assert result.returncode == 0, result.stderr
    assert f"LOADED {snapshot} mlx_lm.models.qwen3 True" in result.stdout


def test_a_missing_model_id_is_one_sentence_naming_it_and_what_was_tried(tmp_path):
    result = run_offline(tmp_path / "hf", LOAD.format(repo="someorg/not-there"))
    message = result.stdout.strip().removeprefix("ERROR ")
    assert result.stdout.startswith("ERROR") and "\n" not in message
    assert "'someorg/not-there'" in message and "not a local folder" in message
    assert str(tmp_path / "hf" / "hub") in message and "HF_HUB_OFFLINE=1" in message


def test_an_architecture_mlx_lm_lacks_is_one_sentence_naming_the_model_type(tmp_path):
    from grpo_tui.worker.engine.models.model_source import ModelSourceError, inspect_model

    folder = build(tmp_path / "m", "qwen3")
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "model_type": "fancy_new_arch"}))
    with pytest.raises(ModelSourceError) as caught:
        inspect_model(ModelConfig(path=str(folder)))
    assert "model type 'fancy_new_arch'" in str(caught.value) and "not supported by mlx-lm" in str(caught.value)


def test_full_fine_tuning_a_quantized_model_is_a_config_error_naming_model_lora(tmp_path):
    from grpo_tui.worker.engine.models.model_source import inspect_model

    q4 = quantize(build(tmp_path / "m", "qwen3"), tmp_path / "q4", 4)
    with pytest.raises(ConfigError) as caught:
        inspect_model(ModelConfig(path=str(q4)))
    assert caught.value.key == "model.lora" and "4-bit quantized" in str(caught.value)
    assert "[model.lora]" in str(caught.value) and str(caught.value).count(". ") == 0
    inspect_model(ModelConfig(path=str(q4), lora=LoraConfig()))  # QLoRA is fine


def test_the_parameter_count_from_the_weight_headers_is_the_loaded_model_s(tmp_path):
    # The trainer decides the evaluation order's width from it before loading (plan.prepare_process).
    from mlx.utils import tree_flatten
    from mlx_lm import load

    from grpo_tui.worker.engine.models.model_source import parameter_count

    for folder in (build(tmp_path / "m", "qwen3"), quantize(build(tmp_path / "m2", "qwen3"), tmp_path / "q4", 4)):
        loaded = sum(v.size for _, v in tree_flatten(load(str(folder))[0].parameters()))
        assert parameter_count(str(folder)) == loaded
    assert parameter_count(str(tmp_path / "nowhere")) is None


def test_a_hub_id_is_looked_up_once_per_process(tmp_path, monkeypatch):
    import huggingface_hub

    from grpo_tui.worker.engine.models import model_source

    snapshot = build(tmp_path / "snapshot", "qwen3")
    calls = []
    monkeypatch.setattr(huggingface_hub, "snapshot_download", lambda repo, **kw: calls.append(repo) or str(snapshot))
    model_source.resolve.cache_clear()
    try:
        # parameter_count, inspect_model and the load each resolve the model
        assert model_source.parameter_count("org/once") is not None
        assert model_source.inspect_model(ModelConfig(path="org/once"))[0] == snapshot
        assert model_source.resolve("org/once") == snapshot
    finally:
        model_source.resolve.cache_clear()
    assert calls == ["org/once"]
