"""The architectures users fine-tune: a GRPO step (full, LoRA, 4-bit LoRA), the checkpoint reloaded
by stock mlx-lm with the same outputs, and a generate from it; the speed paths are either equal to
stock mlx-lm on the architecture or off, and the engine log says which."""

from __future__ import annotations

import math

import mlx.core as mx
import numpy as np
import pytest
from mlx.utils import tree_flatten
from mlx_lm import load as mlx_load
from mlx_lm import stream_generate
from mlx_lm.sample_utils import make_sampler

from grpo_tui.protocol.config import load_config
from grpo_tui.worker.engine.trainer import MlxTrainer
from tests.helpers.arch_models import ARCHITECTURES, LORA, build, quantize, step_config
from tests.helpers.plans import stock_plan

FAST = ("qwen2", "qwen3", "llama", "mistral")  # the llama family: every speed path applies
MODES = ("full", "lora", "4-bit lora")
PROBE = [[1, 7, 30, 31, 9, 82, 92], [1, 7, 64, 5]]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """model type -> (float folder, 4-bit folder)."""
    root = tmp_path_factory.mktemp("arch")
    out = {}
    for arch in ARCHITECTURES:
        base = build(root / arch, arch)
        out[arch] = (base, quantize(base, root / f"{arch}-4bit", 4))
    return out


def _logits(model, rows=PROBE):
    width = max(map(len, rows))
    return [np.array(model(mx.array([r]))[0].astype(mx.float32)) for r in rows if len(r) <= width]


def _greedy(model, tokenizer, prompt: list[int], n: int = 5) -> list[int]:
    sampler = make_sampler(temp=0.0)
    return [r.token for r in stream_generate(model, tokenizer, prompt, max_tokens=n, sampler=sampler)]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_grpo_step_checkpoint_reload_and_generate(arch, mode, models, tmp_path):
    float_dir, q4_dir = models[arch]
    base = q4_dir if mode == "4-bit lora" else float_dir
    lines: list[str] = []
    trainer = MlxTrainer(load_config(step_config(tmp_path, base, "" if mode == "full" else LORA)),
                      log=lambda level, message: lines.append(message))
    before = {k: np.array(v) for k, v in tree_flatten(trainer.policy.model.trainable_parameters())}

    out = trainer.train_step(1)
    assert out.metrics.loss is not None and math.isfinite(out.metrics.loss)
    assert out.metrics.gradients_applied and len(out.generations) == 4
    after = dict(tree_flatten(trainer.policy.model.trainable_parameters()))
    assert any(not np.array_equal(before[k], np.array(v)) for k, v in after.items()), "nothing trained"

    engine = next(line for line in lines if line.startswith("engine: "))
    if arch in FAST:
        assert "rollout: compiled loop" in engine and "prompt once per group" in engine
    else:  # stock mlx-lm runs, and the log says why
        assert "rollout: mlx-lm BatchGenerator" in engine and "training: full sequences" in engine
        assert f"speed paths off for {arch}" in engine

    saved = tmp_path / "checkpoint"
    saved.mkdir()
    trainer.save_model(saved)
    if mode == "full":
        reloaded, tokenizer = mlx_load(str(saved))
    else:
        reloaded, tokenizer = mlx_load(str(base), adapter_path=str(saved))
    trainer.policy.model.eval()
    for ours, stock in zip(_logits(trainer.policy.model), _logits(reloaded)):
        np.testing.assert_allclose(ours, stock, rtol=1e-3, atol=1e-3 * float(np.abs(stock).max()))

    prompt = tokenizer.apply_chat_template([{"role": "user", "content": "What is 2+2?"}], add_generation_prompt=True)
    tokens = _greedy(reloaded, tokenizer, prompt)
    assert tokens and all(0 <= t < 106 for t in tokens)


# ----------------------------------------------------------------------------- speed paths


@pytest.fixture(scope="module")
def fast_models(models):
    """(arch, precision) -> (stock model, model as the engine loads it (patched), tokenizer)."""
    from grpo_tui.protocol.config import LoraConfig, ModelConfig
    from grpo_tui.worker.engine.models import model_io
    from grpo_tui.worker.engine.accel import cpu_fast, patches

    out = {}
    for arch in FAST:
        for precision, folder in zip(("float", "4-bit"), models[arch]):
            stock, tokenizer = mlx_load(str(folder))
            # a quantized base trains with LoRA only; fresh adapters add exactly zero
            lora = LoraConfig(layers=-1) if precision == "4-bit" else None
            engine, _ = model_io.load(ModelConfig(path=str(folder), lora=lora))
            if cpu_fast.enabled():  # as the trainer does when its plan says cpu_kernels
                assert patches.patch_model(engine)
            out[arch, precision] = (stock, engine, tokenizer)
    return out


FAST_CASES = [(a, p) for a in FAST for p in ("float", "4-bit")]


@pytest.mark.parametrize("arch,precision", FAST_CASES)
def test_compiled_rollout_equals_mlx_lm_batch_generation(arch, precision, fast_models, monkeypatch):
    from grpo_tui.protocol.config import GenerationConfig
    from grpo_tui.worker.engine.policy import rollout
    from grpo_tui.worker.engine.accel import fastgen

    stock, engine, tokenizer = fast_models[arch, precision]
    prompts = [tokenizer.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True)
               for q in ("What is 82+57?", "What is 3+4?")]
    gen = GenerationConfig(max_completion_length=10)
    assert fastgen.supports(engine, 1.0)
    fast = rollout.generate(engine, tokenizer, prompts, 2, gen, greedy=True, plan=stock_plan(engine, gen))
    monkeypatch.setattr(fastgen, "supports", lambda *a: False)
    plain = rollout.generate(stock, tokenizer, prompts, 2, gen, greedy=True, plan=stock_plan(stock, gen))
    assert [c.token_ids for c in fast] == [c.token_ids for c in plain]


@pytest.mark.parametrize("arch,precision", FAST_CASES)
def test_shared_prompt_and_cpu_kernels_equal_stock_log_probs(arch, precision, fast_models):
    from grpo_tui.worker.engine.accel import cpu_fast, patches
    from grpo_tui.worker.engine.learning.batch import pack
    from grpo_tui.worker.engine.learning.logps import token_logps

    stock, engine, _ = fast_models[arch, precision]
    assert patches.is_patched(engine) == cpu_fast.enabled()
    rng = np.random.default_rng(0)
    heads = [[int(t) for t in rng.integers(3, 100, n)] for n in (5, 9)]
    prompts = [h for h in heads for _ in range(3)]
    completions = [[int(t) for t in rng.integers(3, 100, int(rng.integers(2, 7)))] for _ in prompts]
    advantages, keep = [1.0] * len(prompts), [True] * len(prompts)
    plain = pack(prompts, completions, advantages, keep)
    shared = pack(prompts, completions, advantages, keep, group=3)
    reference = token_logps(stock, plain, 1.0).logps
    fast = token_logps(engine, shared, 1.0).logps
    mask = np.array(plain.mask) > 0
    np.testing.assert_allclose(np.array(fast)[np.array(shared.mask) > 0], np.array(reference)[mask], atol=2e-4)


def test_sliding_window_layers_keep_the_speed_paths_off_and_the_log_says_why(tmp_path):
    # Llama 3.x-style configs with "layer_types" (e.g. Ministral): mlx-lm runs those layers through a
    # rotating cache and a windowed mask, which the compiled rollout and shared prompt do not model.
    folder = build(tmp_path / "m", "llama", layer_types=["sliding_attention", "full_attention"], sliding_window=4)
    lines: list[str] = []
    trainer = MlxTrainer(load_config(step_config(tmp_path / "run", folder)), log=lambda level, message: lines.append(message))
    engine = next(line for line in lines if line.startswith("engine: "))
    assert "speed paths off for llama: it has sliding-window layers" in engine
    assert "rollout: mlx-lm BatchGenerator" in engine and "training: full sequences" in engine
    assert math.isfinite(trainer.train_step(1).metrics.loss)


def test_gemma2_rolls_out_one_row_at_a_time_and_says_so(models, tmp_path):
    lines: list[str] = []
    MlxTrainer(load_config(step_config(tmp_path, models["gemma2"][0])), log=lambda level, message: lines.append(message))
    engine = next(line for line in lines if line.startswith("engine: "))
    assert "rollout one row at a time (mlx-lm's gemma2 cannot take a batched padding mask)" in engine
