"""The engine's speed-ups must not change the maths: the patched Linear (row-major weight
gradients, flipped small-batch matmul) and the fused AdamW give the same numbers as MLX's own ops."""

import mlx.core as mx
import pytest
import mlx.nn as nn
import mlx.optimizers as optim
from mlx.utils import tree_flatten, tree_map

from grpo_tui.worker.engine.accel import patches
from grpo_tui.worker.engine.accel.patches import row_major_weight_grads
from grpo_tui.worker.engine.learning.update import FusedAdamW, _global_norm


class Tiny(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(11, 6)
        self.proj = nn.Linear(6, 6)
        self.out = nn.Linear(6, 4, bias=False)

    def __call__(self, ids: mx.array) -> mx.array:
        h = self.proj(self.embed(ids))
        return mx.concatenate([self.out(h), self.embed.as_linear(h)], axis=-1)


def _grads(model: Tiny, ids: mx.array) -> dict:
    loss_and_grad = nn.value_and_grad(model, lambda x: (model(x) ** 2).mean())
    loss, grads = loss_and_grad(ids)
    return {"loss": loss, **dict(tree_flatten(grads))}


@pytest.mark.parametrize("length", [3, 40])  # 6 rows: the decode path; 80 rows: the custom-VJP matmul
@pytest.mark.parametrize("flip_min_weight", [0, 1 << 20])  # the flipped matmul for any / only big weights
def test_row_major_gradients_match_mlx(length, flip_min_weight, monkeypatch):
    monkeypatch.setattr(patches, "FLIP_MIN_WEIGHT", flip_min_weight)
    mx.random.seed(0)
    ids = mx.random.randint(0, 11, (2, length))
    plain = Tiny()
    patched = Tiny()
    patched.update(plain.parameters())
    row_major_weight_grads(patched)
    expected, got = _grads(plain, ids), _grads(patched, ids)
    assert set(expected) == set(got)
    for key in expected:
        assert mx.allclose(expected[key], got[key], atol=1e-6), key


def test_fused_adamw_matches_adamw_with_clipping_scale():
    mx.random.seed(1)
    params = {"a": mx.random.normal((7, 5)), "b": mx.random.normal((3,))}
    ref = optim.AdamW(learning_rate=1e-2, weight_decay=0.1)
    fused = FusedAdamW(learning_rate=1e-2, weight_decay=0.1)
    p_ref = p_fused = params
    for _ in range(3):
        grads = tree_map(lambda x: mx.random.normal(x.shape), params)
        p_ref = ref.apply_gradients(tree_map(lambda g: g * 0.5, grads), p_ref)
        fused.grad_scale = mx.array(0.5)
        p_fused = fused.apply_gradients(grads, p_fused)
    for key in params:
        assert mx.allclose(p_ref[key], p_fused[key], atol=1e-7), key
    assert abs(_global_norm(params).item() - mx.sqrt(sum((v * v).sum() for v in params.values())).item()) < 1e-5


def test_fused_adamw_updates_a_model_one_parameter_at_a_time():
    mx.random.seed(2)
    models = [nn.Sequential(*[nn.Linear(1024, 1024, bias=False) for _ in range(8)]) for _ in range(2)]
    models[1].update(models[0].parameters())
    ref, fused = optim.AdamW(learning_rate=1e-2, weight_decay=0.1), FusedAdamW(learning_rate=1e-2, weight_decay=0.1)
    fused.init(models[1].trainable_parameters())
    mx.eval(models, fused.state)
    for _ in range(2):
        grads = tree_map(lambda x: mx.random.normal(x.shape), models[0].trainable_parameters())
        mx.eval(grads)
        ref.update(models[0], grads)
        mx.eval(models[0].parameters(), ref.state)
        mx.synchronize()
        mx.reset_peak_memory()
        before = mx.get_active_memory()
        fused.update(models[1], grads)
        mx.eval(models[1].parameters(), fused.state)
        peak = mx.get_peak_memory() - before
    for (name, want), (_, got) in zip(tree_flatten(models[0].parameters()), tree_flatten(models[1].parameters())):
        assert mx.allclose(want, got, atol=1e-6), name
    # Built all at once, the update peaked at 5× the parameters' size (every new parameter and moment
    # beside the old ones); one parameter at a time, a few times the largest one.
    size = sum(v.nbytes for _, v in tree_flatten(models[1].parameters()))
    assert peak < size


def test_fused_adamw_writes_a_large_parameter_and_its_moments_in_place():
    """The update's transient memory above the step's state is next to nothing: the one
    three-output kernel allocated 5x the largest parameter (the embedding's update was the peak of
    the switched 0.6B step, bench/memory.py)."""
    mx.random.seed(3)
    model = nn.Sequential(nn.Embedding(8192, 512), nn.Linear(512, 64, bias=False))
    fused = FusedAdamW(learning_rate=1e-2, weight_decay=0.1)
    fused.init(model.trainable_parameters())
    grads = tree_map(lambda x: mx.random.normal(x.shape), model.trainable_parameters())
    mx.eval(model.parameters(), fused.state, grads)
    for _ in range(2):  # the first call traces the kernels
        mx.synchronize()
        mx.reset_peak_memory()
        before = mx.get_active_memory()
        fused.update(model, grads)
        mx.eval(model.parameters(), fused.state)
        peak = mx.get_peak_memory() - before
    largest = 8192 * 512 * 4
    assert peak < 0.5 * largest, f"{peak / largest:.2f}x the largest parameter"
