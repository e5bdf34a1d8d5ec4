"""cpu_fast: the multiply-add exp/softmax/SwiGLU/attention/RoPE and the model patch give the same
numbers (and gradients) as MLX's own ops and a stock mlx-lm model."""


import mlx.core as mx
import mlx.nn as nn
import numpy as np
import pytest
from mlx.utils import tree_flatten
from mlx_lm import load as mlx_load
from mlx_lm.models import cache as lm_cache
from mlx_lm.models import llama

from grpo_tui.protocol.config import ModelConfig, parse_config
from grpo_tui.worker.engine.models import plan as engine_plan
from grpo_tui.worker.engine.accel import cpu_fast, patches
from grpo_tui.worker.engine.models.model_io import load as policy_load
from tests.conftest import EXAMPLES
from tests.helpers.loss_cases import LOSS_CONFIG, close

TINY = str(EXAMPLES / "models" / "tiny-arith")


# ----------------------------------------------------------------------------- exp


def test_fast_exp_matches_exp_over_the_float32_range():
    x = mx.array(np.linspace(-87.0, 88.0, 100_001, dtype=np.float32))
    got = np.array(cpu_fast.fast_exp(x)).astype(np.float64)
    ref = np.exp(np.array(x).astype(np.float64))
    assert np.max(np.abs(got - ref) / ref) < 1e-5
    np.testing.assert_allclose(got, np.array(mx.exp(x)), rtol=1e-5)


def test_fast_exp_special_values():
    got = cpu_fast.fast_exp(mx.array([0.0, -87.01, -88.0, -100.0, -1e4, -1e30, -np.inf, 1.0, -1.0])).tolist()
    assert got[0] == 1.0  # exactly
    assert got[1:7] == [0.0] * 6  # underflow is exactly zero, never garbage from the exponent bits
    assert got[7] == pytest.approx(np.e, rel=1e-6)
    assert got[8] == pytest.approx(1 / np.e, rel=1e-6)


def test_fast_exp_gradient_is_exp_times_cotangent():
    x = mx.array(np.linspace(-20, 20, 301, dtype=np.float32))
    w = mx.array(np.random.default_rng(0).normal(size=301).astype(np.float32))
    got = mx.grad(lambda t: (cpu_fast.fast_exp(t) * w).sum())(x)
    ref = mx.grad(lambda t: (mx.exp(t) * w).sum())(x)
    close(got, ref, rtol=1e-5, atol=1e-30)
    close(got, mx.exp(x) * w, rtol=1e-5, atol=1e-30)


@pytest.mark.parametrize("dtype", [mx.float16, mx.bfloat16])
def test_fast_exp_keeps_the_dtype(dtype):
    x = mx.array(np.linspace(-10, 10, 101, dtype=np.float32)).astype(dtype)
    got = cpu_fast.fast_exp(x)
    assert got.dtype == dtype and got.shape == x.shape
    close(got, mx.exp(x), rtol=1e-2)


# ----------------------------------------------------------------------------- softmax family


def _rows():
    rng = np.random.default_rng(1)
    x = rng.normal(scale=30, size=(4, 257)).astype(np.float32)
    x[1, ::3] = -1e30  # masked entries
    x[2, :] = -1e30
    x[2, 5] = 3.0  # one live entry
    x[3] += 1000.0  # large offsets
    return mx.array(x)


def test_logsumexp_and_softmax_equal_mlx():
    x = _rows()
    close(cpu_fast.logsumexp(x), mx.logsumexp(x, axis=-1), rtol=1e-6)
    close(cpu_fast.softmax(x), mx.softmax(x, axis=-1), rtol=1e-5, atol=1e-7)
    close(cpu_fast.logsumexp(x, axis=0), mx.logsumexp(x, axis=0), rtol=1e-6)
    close(cpu_fast.softmax(x.T.reshape(1, 257, 4)), mx.softmax(x.T.reshape(1, 257, 4), axis=-1), rtol=1e-5, atol=1e-7)
    s = np.array(cpu_fast.softmax(x))
    assert np.all(np.isfinite(s)) and np.allclose(s.sum(-1), 1.0, atol=1e-5)
    assert s[1, ::3].max() == 0.0 and s[2, 5] == 1.0


def test_logsumexp_and_softmax_gradients_equal_mlx():
    x = _rows()[:, :64] / 10
    w = mx.array(np.random.default_rng(2).normal(size=(4, 64)).astype(np.float32))
    close(mx.grad(lambda t: (cpu_fast.logsumexp(t) * w[:, 0]).sum())(x),
          mx.grad(lambda t: (mx.logsumexp(t, axis=-1) * w[:, 0]).sum())(x), atol=1e-6)
    close(mx.grad(lambda t: (cpu_fast.softmax(t) * w).sum())(x),
          mx.grad(lambda t: (mx.softmax(t, axis=-1) * w).sum())(x), atol=1e-6)


def test_swiglu_value_and_gradients():
    rng = np.random.default_rng(3)
    gate = mx.array(np.concatenate([rng.normal(scale=4, size=500), [-200.0, -90.0, -88.0, 0.0, 90.0, 200.0]]).astype(np.float32))
    up = mx.array(rng.normal(size=gate.shape[0]).astype(np.float32))
    w = mx.array(rng.normal(size=gate.shape[0]).astype(np.float32))
    ref = nn.silu(gate) * up
    got = cpu_fast.swiglu(gate, up)
    assert np.all(np.isfinite(np.array(got)))
    close(got, ref, rtol=1e-5, atol=1e-6)
    gg, gu = mx.grad(lambda g, u: (cpu_fast.swiglu(g, u) * w).sum(), argnums=(0, 1))(gate, up)
    rg, ru = mx.grad(lambda g, u: (nn.silu(g) * u * w).sum(), argnums=(0, 1))(gate, up)
    close(gg, rg, rtol=1e-5, atol=1e-6)
    close(gu, ru, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", [mx.bfloat16, mx.float16])
def test_softmax_half_precision(dtype):
    x = mx.array(np.random.default_rng(4).normal(size=(2, 8)).astype(np.float32)).astype(dtype)
    got = cpu_fast.softmax(x)
    assert got.shape == x.shape
    close(got, mx.softmax(x, axis=-1), rtol=2e-2, atol=2e-3)


@pytest.mark.parametrize("dtype", [mx.bfloat16, mx.float16])
def test_swiglu_half_precision(dtype):
    """Most checkpoints (Qwen3 included) are bfloat16; the patched MLP must run on them."""
    rng = np.random.default_rng(4)
    gate = mx.array(rng.normal(size=(2, 8)).astype(np.float32)).astype(dtype)
    up = mx.array(rng.normal(size=(2, 8)).astype(np.float32)).astype(dtype)
    got = cpu_fast.swiglu(gate, up)
    assert got.shape == gate.shape and got.dtype == dtype
    close(got, nn.silu(gate) * up, rtol=2e-2, atol=2e-2)


# ----------------------------------------------------------------------------- attention


def _qkv(B=2, H=4, KV=4, L=5, S=5, D=16, seed=0, dtype=mx.float32):
    mx.random.seed(seed)
    q = mx.random.normal((B, H, L, D)).astype(dtype)
    k = mx.random.normal((B, KV, S, D)).astype(dtype)
    v = mx.random.normal((B, KV, S, D)).astype(dtype)
    return q, k, v


def _bool_mask(B, L, S):
    rng = np.random.default_rng(5)
    m = rng.random((B, 1, L, S)) < 0.6
    m[..., 0] = True  # every query sees something
    return mx.array(m)


CASES = {
    "none": dict(),
    "causal": dict(mask="causal"),
    "causal_L<S": dict(L=3, S=7, mask="causal"),
    "decode_L=1": dict(L=1, S=9, mask="causal"),
    "bool": dict(L=4, S=6, mask="bool"),
    "additive": dict(L=4, S=6, mask="additive"),
    "gqa_causal": dict(H=4, KV=2, L=6, S=6, mask="causal"),
    "gqa_bool_L<S": dict(H=4, KV=2, L=3, S=8, mask="bool"),
    "mqa_additive": dict(H=4, KV=1, L=4, S=4, mask="additive"),
}


@pytest.mark.parametrize("case", CASES)
def test_attention_equals_mlx_sdpa(case):
    kw = dict(CASES[case])
    kind = kw.pop("mask", None)
    q, k, v = _qkv(**kw)
    B, L, S = q.shape[0], q.shape[2], k.shape[2]
    if kind == "bool":
        mask = _bool_mask(B, L, S)
    elif kind == "additive":
        mask = mx.array(np.random.default_rng(6).normal(scale=3, size=(B, 1, L, S)).astype(np.float32))
    else:
        mask = kind
    scale = q.shape[-1] ** -0.5
    ref = mx.fast.scaled_dot_product_attention(q, k, v, scale=scale, mask=mask)
    got = cpu_fast.attention(q, k, v, scale, mask)
    assert got.shape == ref.shape
    close(got, ref, rtol=1e-4, atol=1e-5)


def _fully_masked_case(dtype):
    q, k, v = _qkv(B=2, H=4, KV=2, L=4, S=4, dtype=dtype)
    causal = np.tril(np.ones((4, 4), bool))
    m = np.stack([causal, causal])[:, None].copy()
    m[0, 0, :, :2] = False  # row 0 left-padded by 2: its first two queries see no key at all
    return q, k, v, mx.array(m)


@pytest.mark.parametrize("dtype", [mx.float32, mx.bfloat16])
def test_fully_masked_query_stays_finite(dtype):
    q, k, v, mask = _fully_masked_case(dtype)
    got = np.array(cpu_fast.attention(q, k, v, 0.25, mask).astype(mx.float32))
    assert np.all(np.isfinite(got))
    ref = np.array(mx.fast.scaled_dot_product_attention(q, k, v, scale=0.25, mask=mask).astype(mx.float32))
    tol = 1e-5 if dtype == mx.float32 else 3e-2
    # the rows that see something are unaffected by their fully masked neighbours
    np.testing.assert_allclose(got[0, :, 2:], ref[0, :, 2:], rtol=tol, atol=tol)
    np.testing.assert_allclose(got[1], ref[1], rtol=tol, atol=tol)


def test_fully_masked_query_stays_finite_float16():
    q, k, v, mask = _fully_masked_case(mx.float16)
    got = np.array(cpu_fast.attention(q, k, v, 0.25, mask).astype(mx.float32))
    assert np.all(np.isfinite(got))


# ----------------------------------------------------------------------------- RoPE


@pytest.mark.parametrize("traditional", [False, True])
@pytest.mark.parametrize("dims", [16, 8])
@pytest.mark.parametrize("offset", ["int0", "int", "scalar", "rows"])
def test_rope_equals_nn_rope(traditional, dims, offset):
    module = nn.RoPE(dims, traditional=traditional, base=10000.0, scale=1.0 if dims == 16 else 0.5)
    x = mx.random.normal((3, 2, 5, 16), key=mx.random.key(7))
    off = {"int0": 0, "int": 11, "scalar": mx.array(11), "rows": mx.array([0, 4, 300])}[offset]
    got = cpu_fast.rope(module, x, off, 4096)
    ref = module(x, offset=off)
    assert got.shape == ref.shape
    close(got, ref, rtol=1e-4, atol=2e-5)
    if offset == "rows":  # row b matches an int offset of its own
        for b, o in enumerate([0, 4, 300]):
            close(got[b], mx.fast.rope(x[b : b + 1], dims, traditional=traditional, base=10000.0,
                                       scale=module.scale, offset=o)[0], rtol=1e-4, atol=2e-5)


def test_rope_far_positions():
    module = nn.RoPE(32, base=1_000_000.0)
    x = mx.random.normal((1, 2, 4, 32), key=mx.random.key(8))
    close(cpu_fast.rope(module, x, 4000, 8192), module(x, offset=4000), rtol=1e-3, atol=2e-4)


# ----------------------------------------------------------------------------- patch_model


@pytest.fixture(scope="module")
def tiny_pair():
    stock, _ = mlx_load(TINY)
    patched, _ = mlx_load(TINY)
    assert patches.patch_model(patched)
    return stock, patched


BATCH = mx.array([[1, 7, 104, 64, 81, 74, 93, 9, 82, 92, 9, 28], [1, 7, 104, 64, 5, 5, 30, 31, 2, 0, 0, 0]])


def test_patched_model_logits_equal_stock(tiny_pair):
    stock, patched = tiny_pair
    assert type(patched.model.layers[0].self_attn) is not type(stock.model.layers[0].self_attn)
    ref, got = stock(BATCH), patched(BATCH)
    scale = float(mx.abs(ref).max())
    assert float(mx.abs(got - ref).max()) < 1e-5 * scale + 1e-5
    assert (mx.argmax(got, -1) == mx.argmax(ref, -1)).all().item()


def test_patched_model_logits_equal_stock_with_kv_cache(tiny_pair):
    """Prefill then token-by-token decoding through mlx-lm's KVCache (int offsets)."""
    stock, patched = tiny_pair
    outs = []
    for m in (stock, patched):
        cache = lm_cache.make_prompt_cache(m)
        steps = [m(BATCH[:, :8], cache=cache)[:, -1]]
        for t in range(8, 12):
            steps.append(m(BATCH[:, t : t + 1], cache=cache)[:, -1])
        outs.append(mx.stack(steps, 1))
    close(outs[1], outs[0], rtol=1e-4, atol=1e-4)
    close(outs[1][:, -1], stock(BATCH)[:, -1], rtol=1e-4, atol=1e-4)


def _loss(model, tokens):
    logits = model(tokens[:, :-1]).astype(mx.float32)
    return nn.losses.cross_entropy(logits, tokens[:, 1:]).mean()


def test_patched_model_gradients_equal_stock(tiny_pair):
    stock, patched = tiny_pair
    ls, gs = nn.value_and_grad(stock, _loss)(stock, BATCH)
    lp, gp = nn.value_and_grad(patched, _loss)(patched, BATCH)
    assert float(lp) == pytest.approx(float(ls), rel=1e-5)
    gs, gp = dict(tree_flatten(gs)), dict(tree_flatten(gp))
    assert gs.keys() == gp.keys()
    for name in gs:
        scale = float(mx.abs(gs[name]).max()) + 1e-8
        assert float(mx.abs(gp[name] - gs[name]).max()) <= 1e-3 * scale, name


def test_patch_adds_no_parameters_and_checkpoints_load_into_stock(tiny_pair, tmp_path):
    stock, _ = tiny_pair
    fresh, _ = mlx_load(TINY)
    before = dict(tree_flatten(fresh.parameters()))
    assert patches.patch_model(fresh)
    after = dict(tree_flatten(fresh.parameters()))
    assert before.keys() == after.keys()
    assert all(after[k] is before[k] for k in before)
    assert dict(tree_flatten(fresh.trainable_parameters())).keys() == before.keys()
    fresh.save_weights(str(tmp_path / "w.safetensors"))
    assert set(mx.load(str(tmp_path / "w.safetensors"))) == set(before)
    other, _ = mlx_load(TINY)
    other.load_weights(str(tmp_path / "w.safetensors"))  # strict: same names, same shapes


def test_policy_load_patches_on_x86_cpu():
    model, _ = policy_load(ModelConfig(path=TINY))
    plan = engine_plan.decide(model, parse_config(LOSS_CONFIG, check_paths=False))
    assert plan.cpu_kernels == cpu_fast.enabled()
    if plan.cpu_kernels:  # as the trainer does
        patches.patch_model(model)
    attn = type(model.model.layers[0].self_attn).__name__
    assert attn.startswith("CpuFast") == cpu_fast.enabled()


def test_patched_bfloat16_model_equals_stock():
    """Qwen3 checkpoints ship in bfloat16: the patched model must run them like the stock one."""
    stock, _ = mlx_load(TINY)
    patched, _ = mlx_load(TINY)
    stock.set_dtype(mx.bfloat16)
    patched.set_dtype(mx.bfloat16)
    assert patches.patch_model(patched)
    ref, got = stock(BATCH).astype(mx.float32), patched(BATCH).astype(mx.float32)
    assert float(mx.abs(got - ref).max()) < 0.05 * float(mx.abs(ref).max())


def _llama(**extra):
    cfg = dict(model_type="llama", hidden_size=32, num_hidden_layers=2, intermediate_size=48,
               num_attention_heads=4, num_key_value_heads=2, rms_norm_eps=1e-5, vocab_size=64,
               max_position_embeddings=128, tie_word_embeddings=False)
    cfg.update(extra)
    mx.random.seed(11)
    model = llama.Model(llama.ModelArgs.from_dict(cfg))
    mx.eval(model.parameters())
    return model


@pytest.mark.parametrize("extra", [
    dict(),
    dict(rope_traditional=True, attention_bias=True, num_key_value_heads=1),
    dict(rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                       "high_freq_factor": 4.0, "original_max_position_embeddings": 64}),
], ids=["gqa", "traditional_bias_mqa", "llama3_rope"])
def test_patched_llama_equals_stock(extra):
    stock, patched = _llama(**extra), _llama(**extra)
    assert patches.patch_model(patched)
    tokens = mx.array(np.random.default_rng(12).integers(0, 64, size=(2, 10)))
    close(patched(tokens), stock(tokens), rtol=1e-4, atol=1e-5)


def test_patch_refuses_unsupported_models_and_changes_nothing():
    from mlx_lm.models import gpt2

    g = gpt2.Model(gpt2.ModelArgs(model_type="gpt2", n_ctx=32, n_embd=16, n_head=2, n_layer=1,
                                  n_positions=32, layer_norm_epsilon=1e-5, vocab_size=40))
    classes = [type(m) for _, m in g.named_modules()]
    assert patches.patch_model(g) is False
    assert [type(m) for _, m in g.named_modules()] == classes

    # A llama-typed model whose last layer has an MLP we do not recognise: refused before any swap.
    model = _llama()
    model.model.layers[-1].mlp = nn.Sequential(nn.Linear(32, 32))
    classes = [type(m) for _, m in model.named_modules()]
    assert patches.patch_model(model) is False
    assert [type(m) for _, m in model.named_modules()] == classes
    assert not hasattr(model.model.layers[0].self_attn, "_rope_positions")

    assert patches.patch_model(nn.Linear(2, 2)) is False


def test_the_fast_exp_keeps_few_arrays_of_its_input_s_size():
    # One trace split at its two bit casts kept x·log2 e, its rounding and the bits: five arrays of
    # x's size at the peak (the LM head's exp on a 128 MB chunk of logits held 0.6 GB).
    x = mx.random.normal((256, 40_000), key=mx.random.key(5)) * 10
    mx.eval(x, cpu_fast.fast_exp(x))  # compiled before the measurement
    mx.synchronize()
    mx.reset_peak_memory()
    base = mx.get_active_memory()
    y = cpu_fast.fast_exp(x)
    mx.eval(y)
    assert mx.get_peak_memory() - base < 3.5 * x.nbytes
    np.testing.assert_allclose(np.array(y), np.exp(np.array(x, dtype=np.float64)), rtol=1e-5)


def _single_trace_exp(x: mx.array) -> mx.array:
    """The fast exp as one trace with two bit casts (before the two compiled halves)."""
    y = mx.clip(x, -87.0, 88.0) * cpu_fast._LOG2E
    rounded = y + cpu_fast._ROUND
    power = ((rounded.view(mx.int32) - 0x4B400000 + 127) << 23).view(mx.float32)
    f = y - (rounded - cpu_fast._ROUND)
    p = cpu_fast._POLY[7]
    for c in reversed(cpu_fast._POLY[:7]):
        p = p * f + c
    return mx.where(x < -87.0, 0.0, p * power)


def test_the_two_halves_give_the_single_trace_s_bits():
    x = mx.concatenate([mx.random.normal((200_000,), key=mx.random.key(6)) * 30,
                        mx.array([-mx.inf, mx.inf, -87.0, -86.99, 88.0, 89.0, 0.0, -0.0, 1e-30, -200.0])])
    want = np.array(mx.compile(_single_trace_exp)(x))
    np.testing.assert_array_equal(np.array(cpu_fast.fast_exp(x)), want)
    np.testing.assert_array_equal(np.array(mx.compile(cpu_fast._exp_kernel)(x)), want)  # SwiGLU's inline form
