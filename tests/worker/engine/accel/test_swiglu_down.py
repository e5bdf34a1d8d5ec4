"""cpu_fast.swiglu_down: an MLP's SwiGLU and down projection as one function whose backward
recomputes silu(gate) * up: MLX's numbers and gradients, one array fewer per block kept from the
forward for the backward, and the patched MLP uses it only for a trainable plain down projection
at training shapes."""

import mlx.core as mx
import mlx.nn as nn
import pytest
from mlx.utils import tree_flatten
from mlx_lm.tuner.utils import linear_to_lora_layers

from grpo_tui.worker.engine.accel import cpu_fast, patches
from tests.helpers.loss_cases import close


def _reference(gate: mx.array, up: mx.array, weight: mx.array) -> mx.array:
    return (nn.silu(gate) * up) @ weight.T


def _inputs(dtype=mx.float32, shape=(3, 5, 48), out=16):
    keys = mx.random.split(mx.random.key(11), 4)
    gate = mx.random.normal(shape, key=keys[0]) * 3
    up = mx.random.normal(shape, key=keys[1])
    weight = mx.random.normal((out, shape[-1]), key=keys[2]) / 7
    cot = mx.random.normal(shape[:-1] + (out,), key=keys[3])
    return tuple(a.astype(dtype) for a in (gate, up, weight, cot))


def _grads(fn, gate, up, weight, cot):
    return mx.grad(lambda *a: (fn(*a) * cot).sum(), argnums=(0, 1, 2))(gate, up, weight)


@pytest.mark.parametrize("shape", [(3, 5, 48), (7, 48)])
def test_value_and_gradients_equal_mlx(shape):
    gate, up, weight, cot = _inputs(shape=shape)
    close(cpu_fast.swiglu_down(gate, up, weight), _reference(gate, up, weight), rtol=1e-5, atol=1e-5)
    for got, want in zip(_grads(cpu_fast.swiglu_down, gate, up, weight, cot), _grads(_reference, gate, up, weight, cot)):
        assert got.shape == want.shape
        close(got, want, rtol=1e-4, atol=1e-5)


def test_half_precision_keeps_the_dtype():
    inputs = _inputs(mx.bfloat16)
    for got, want in zip(_grads(cpu_fast.swiglu_down, *inputs), _grads(_reference, *inputs)):
        assert got.dtype == mx.bfloat16
        close(got, want, rtol=5e-2, atol=5e-2)


def _retained(mlp, blocks: int, positions: int = 512, hidden: int = 64, intermediate: int = 1024) -> int:
    """Bytes the backward of ``blocks`` residual MLPs keeps from their forward (evaluated alone)."""
    keys = mx.random.split(mx.random.key(12), 3 * blocks + 1)
    x = mx.random.normal((positions, hidden), key=keys[-1])
    weights = [w for i in range(blocks) for w in (mx.random.normal((intermediate, hidden), key=keys[3 * i]) / 30,
                                                   mx.random.normal((intermediate, hidden), key=keys[3 * i + 1]) / 30,
                                                   mx.random.normal((hidden, intermediate), key=keys[3 * i + 2]) / 70)]
    mx.eval(x, weights)

    def loss(*ws):
        h = x
        for i in range(blocks):
            h = h + mlp(h @ ws[3 * i].T, h @ ws[3 * i + 1].T, ws[3 * i + 2])
        return [(h * h).sum()]

    mx.eval(mx.vjp(loss, weights, [mx.array(1.0)]))  # compiled kernels built before the measurement
    base = mx.get_active_memory()
    outputs, grads = mx.vjp(loss, weights, [mx.array(1.0)])
    mx.eval(outputs)
    kept = mx.get_active_memory() - base
    mx.eval(grads)
    return kept


def test_the_backward_keeps_one_intermediate_array_fewer_per_block():
    blocks, one_array = 8, 512 * 1024 * 4
    separate = _retained(lambda g, u, w: cpu_fast.swiglu(g, u) @ w.T, blocks)
    fused = _retained(cpu_fast.swiglu_down, blocks)
    assert separate - fused >= 0.9 * blocks * one_array, (separate, fused, one_array)


class _MLP(nn.Module):
    def __init__(self, hidden=32, intermediate=64):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, intermediate, bias=False)
        self.up_proj = nn.Linear(hidden, intermediate, bias=False)
        self.down_proj = nn.Linear(intermediate, hidden, bias=False)


class _Layers(nn.Module):
    """What linear_to_lora_layers walks: ``.layers``."""

    def __init__(self, mlp):
        super().__init__()
        self.layers = [mlp]


def _value_and_grads(mlp, x):
    return nn.value_and_grad(mlp, lambda m, h: (patches._mlp_call(m, h) ** 2).sum())(mlp, x)


@pytest.fixture
def fused_calls(monkeypatch):
    calls = []
    original = cpu_fast.swiglu_down
    monkeypatch.setattr(cpu_fast, "swiglu_down", lambda *a: calls.append(a[0].shape) or original(*a))
    return calls


TRAINING = mx.random.normal((2, 40, 32), key=mx.random.key(13))  # 80 positions: above DECODE_ROWS


def test_the_patched_mlp_fuses_a_trainable_plain_down_projection(fused_calls):
    mlp = _MLP()
    patches.row_major_weight_grads(mlp)  # what the policy's loading does to its Linear layers
    value, grads = _value_and_grads(mlp, TRAINING)
    assert fused_calls == [(2, 40, 64)]
    x = TRAINING
    close(value, (mlp.down_proj(nn.silu(mlp.gate_proj(x)) * mlp.up_proj(x)) ** 2).sum(), rtol=1e-5)
    stock = nn.value_and_grad(mlp, lambda m, h: (m.down_proj(nn.silu(m.gate_proj(h)) * m.up_proj(h)) ** 2).sum())
    close(grads["down_proj"]["weight"], stock(mlp, x)[1]["down_proj"]["weight"], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("case", ["decoding", "frozen", "lora"])
def test_the_patched_mlp_keeps_the_plain_path(case, fused_calls):
    mlp, x = _MLP(), TRAINING
    if case == "decoding":
        x = TRAINING[:, :1]
    elif case == "frozen":
        mlp.down_proj.freeze()
    else:
        mlp.freeze()
        linear_to_lora_layers(_Layers(mlp), 1, {"rank": 4, "scale": 10.0, "dropout": 0.0, "keys": ["down_proj"]})
    _, grads = _value_and_grads(mlp, x)
    assert not fused_calls
    if case == "lora":
        assert {k for k, _ in tree_flatten(grads["down_proj"])} == {"lora_a", "lora_b"}
