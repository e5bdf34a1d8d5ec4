"""The compiled loss-and-gradient equals the eager one, and always sees the current weights."""

import mlx.core as mx
import numpy as np
import pytest
from mlx.utils import tree_flatten, tree_map

from grpo_tui.protocol.config import LoraConfig, ModelConfig, parse_config
from grpo_tui.worker.engine.learning import batch as batch_layout
from grpo_tui.worker.engine.models import model_io, plan as engine_plan
from grpo_tui.worker.engine.learning.batch import pack
from grpo_tui.worker.engine.learning.grpo import LossSettings
from tests.helpers.loss_cases import LOSS_CONFIG, loss_and_grad
from tests.helpers.tiny_model import build_tiny_model

G = 4
@pytest.fixture(scope="module")
def model(tmp_path_factory):
    m, _ = model_io.load(ModelConfig(path=str(build_tiny_model(tmp_path_factory.mktemp("tiny")))))
    return m


def _batch(vocab: int, seed: int):
    rng = np.random.default_rng(seed)
    heads = [[int(t) for t in rng.integers(3, vocab, n)] for n in (6, 9)]
    prompts = [h for h in heads for _ in range(G)]
    completions = [[int(t) for t in rng.integers(3, vocab, int(rng.integers(2, 9)))] for _ in prompts]
    advantages = [float(a) for a in rng.normal(size=len(prompts))]
    return pack(prompts, completions, advantages, [True] * len(prompts), group=G)


def _run(model, batch, config, compiled):
    (loss, logps, metrics), grads = loss_and_grad(model, batch, LossSettings.from_config(config), config.generation.temperature,
                                                            float(mx.sum(batch.mask).item()), 1, compiled=compiled)
    mx.eval(loss, logps, metrics, grads)
    return loss.item(), np.array(logps), {k: v.item() for k, v in metrics.items()}, dict(tree_flatten(grads))


def _assert_same(a, b):
    assert a[0] == pytest.approx(b[0], rel=1e-5, abs=1e-7)
    np.testing.assert_allclose(a[1], b[1], atol=1e-5)
    for k in a[2]:
        assert a[2][k] == pytest.approx(b[2][k], rel=1e-4, abs=1e-6), k
    for k in a[3]:
        np.testing.assert_allclose(np.array(a[3][k]), np.array(b[3][k]), atol=1e-6, rtol=1e-4, err_msg=k)


def test_compiled_equals_eager_and_follows_weight_updates(model):
    config = parse_config(LOSS_CONFIG, check_paths=False)
    batch = _batch(model.args.vocab_size, 0)
    _assert_same(_run(model, batch, config, True), _run(model, batch, config, False))

    # An update between calls (what the optimizer does every step) must be seen by the trace.
    before = _run(model, batch, config, True)
    model.update(tree_map(lambda p: p * 1.05, model.parameters()))
    after_compiled, after_eager = _run(model, batch, config, True), _run(model, batch, config, False)
    _assert_same(after_compiled, after_eager)
    assert not np.allclose(before[1], after_compiled[1])

    # Another batch with the same bucketed shapes reuses the trace and is still right.
    other = _batch(model.args.vocab_size, 1)
    assert other.prompts.shape == batch.prompts.shape and other.targets.shape == batch.targets.shape
    _assert_same(_run(model, other, config, True), _run(model, other, config, False))


def test_shared_layout_widths_are_bucketed(model):
    batch = _batch(model.args.vocab_size, 0)
    assert batch.prompts.shape[1] % batch_layout.BUCKET == 0
    assert batch.targets.shape[1] % batch_layout.BUCKET == 0


def test_small_models_compile_and_large_ones_do_not(model, monkeypatch):
    config = parse_config(LOSS_CONFIG, check_paths=False)
    assert engine_plan.decide(model, config).compiled_loss
    monkeypatch.setattr(engine_plan, "SMALL_MODEL_PARAMETERS", 10)
    assert not engine_plan.decide(model, config).compiled_loss


def test_target_logps_gradient_matches_plain_autodiff():
    from grpo_tui.worker.engine.learning.logps import _logps_entropy

    logits = mx.random.normal((6, 5, 300), key=mx.random.key(0)) * 3
    targets = mx.random.randint(0, 300, (6, 5), key=mx.random.key(1))
    weights = mx.random.normal((6, 5), key=mx.random.key(2))

    def plain(x):
        lp = mx.take_along_axis(x, targets[..., None], axis=-1)[..., 0] - mx.logsumexp(x, axis=-1)
        return mx.sum(lp * weights)

    def ours(x):
        return mx.sum(_logps_entropy(x, targets)[0] * weights)

    assert ours(logits).item() == pytest.approx(plain(logits).item(), rel=1e-5)
    np.testing.assert_allclose(np.array(mx.grad(ours)(logits)), np.array(mx.grad(plain)(logits)), atol=1e-6)
    p = mx.softmax(logits, axis=-1)
    entropy = -mx.sum(p * mx.log(p), axis=-1)
    np.testing.assert_allclose(np.array(_logps_entropy(logits, targets)[1]), np.array(entropy), rtol=1e-4, atol=1e-5)


def test_lora_dropout_draws_a_new_mask_every_compiled_call(tmp_path):
    path = str(build_tiny_model(tmp_path))
    model, _ = model_io.load(ModelConfig(path=path, lora=LoraConfig(rank=4, layers=-1, dropout=0.5)))
    model.train()
    # mlx-lm starts lora_b at zero, where dropout cannot show in the loss: give it values.
    model.update(tree_map(lambda p: mx.random.normal(p.shape) * 0.5, model.trainable_parameters()))
    config = parse_config(LOSS_CONFIG, check_paths=False)
    batch = _batch(model.args.vocab_size, 0)
    logps = [_run(model, batch, config, True)[1] for _ in range(3)]
    # A mask frozen into the trace would give the same log-probs every time.
    assert not np.allclose(logps[0], logps[1]) and not np.allclose(logps[1], logps[2])
