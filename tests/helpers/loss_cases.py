"""Small engine cases shared by the loss, memory-switch and acceleration tests: the loss config,
a tiny Qwen3 with a 5,000-token vocabulary, packed micro-batches, one micro-batch's loss and
gradients, and the comparisons the tests make between two paths."""

import mlx.core as mx
import mlx.optimizers as optim
import numpy as np
import pytest
from mlx.utils import tree_flatten
from mlx_lm.models import qwen3

from grpo_tui.protocol.config import LoraConfig, parse_config
from grpo_tui.worker.engine.learning import chunked_head, loss as loss_step, tied_embedding
from grpo_tui.worker.engine.models import model_io
from grpo_tui.worker.engine.learning.batch import pack
from grpo_tui.worker.engine.learning.grpo import LossSettings
from grpo_tui.worker.engine.models.plan import Head
from grpo_tui.worker.engine.learning.update import optimize_pass

G = 4


LOSS_CONFIG = """
[model]
path = "unused"
[data]
path = "unused.jsonl"
[[rewards]]
name = "accuracy"
[grpo]
group_size = 4
loss_type = "dapo"
epsilon_high = 0.28
[generation]
max_completion_length = 8
temperature = 0.9
"""


# The loss config with the loss type a parameter and a plain AdamW step.
STREAMS_CONFIG = LOSS_CONFIG.replace('loss_type = "dapo"', 'loss_type = "{loss_type}"') + """[training]
learning_rate = 0.01
max_grad_norm = 0.0
"""


def stream_batch(vocab: int, seed: int, groups: int, group: int = G):
    rng = np.random.default_rng(seed)
    heads = [[int(t) for t in rng.integers(3, vocab, int(rng.integers(4, 10)))] for _ in range(groups)]
    prompts = [h for h in heads for _ in range(G)]
    completions = [[int(t) for t in rng.integers(3, vocab, int(rng.integers(2, 9)))] for _ in prompts]
    advantages = [float(a) for a in rng.normal(size=len(prompts))]
    keep = [i % 5 != 3 for i in range(len(prompts))]  # some masked rows: token counts differ per part
    return pack(prompts, completions, advantages, keep, group=group)


def reference_logps_entropy(x: np.ndarray, targets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    x = x.astype(np.float64)
    logp = x - x.max(1, keepdims=True)
    logp -= np.log(np.exp(logp).sum(1, keepdims=True))
    return logp[np.arange(len(x)), targets], -(np.exp(logp) * logp).sum(1)


def reference_is_top(x: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """1.0 where the target is the row's most likely entry."""
    return (x[np.arange(len(x)), targets] >= x.max(1)).astype(np.float32)


def close(a, b, rtol=1e-5, atol=1e-6):
    np.testing.assert_allclose(np.array(a.astype(mx.float32)), np.array(b.astype(mx.float32)), rtol=rtol, atol=atol)


VOCAB = 5000


SWITCH_CONFIG = LOSS_CONFIG.replace('loss_type = "dapo"', 'loss_type = "{loss_type}"') + """[training]
learning_rate = 0.01
max_grad_norm = 0.0
{training}
"""


def switch_config(loss_type: str = "dapo", training: str = ""):
    return parse_config(SWITCH_CONFIG.format(loss_type=loss_type, training=training), check_paths=False)


def small_model(lora: bool, seed: int = 0, tie: bool = True):
    mx.random.seed(seed)
    args = qwen3.ModelArgs(model_type="qwen3", hidden_size=64, num_hidden_layers=2, intermediate_size=128,
                           num_attention_heads=4, rms_norm_eps=1e-6, vocab_size=VOCAB, num_key_value_heads=2,
                           max_position_embeddings=512, rope_theta=10000.0, head_dim=16, tie_word_embeddings=tie)
    model = qwen3.Model(args)
    mx.eval(model.parameters())
    if lora:
        add_lora(model)
    model.train()
    return model


def add_lora(model):
    model.freeze()
    model_io.add_lora(model, LoraConfig(rank=4, layers=-1))
    # LoRA's B starts at zero: make it non-zero so the adapters' gradients are all exercised.
    for _, module in model.named_modules():
        if hasattr(module, "lora_b"):
            module.lora_b = mx.random.normal(module.lora_b.shape) * 0.05
    mx.eval(model.parameters())


def switch_batch(seed: int, groups: int, group: int = G):
    rng = np.random.default_rng(seed)
    heads = [[int(t) for t in rng.integers(3, VOCAB, int(rng.integers(4, 10)))] for _ in range(groups)]
    prompts = [h for h in heads for _ in range(G)]
    completions = [[int(t) for t in rng.integers(3, VOCAB, int(rng.integers(2, 9)))] for _ in prompts]
    advantages = [float(a) for a in rng.normal(size=len(prompts))]
    keep = [i % 5 != 3 for i in range(len(prompts))]
    return pack(prompts, completions, advantages, keep, group=group)


def grads(model, batch, config, compiled=False, **options):
    (loss, logps, metrics), grads = loss_and_grad(
        model, batch, LossSettings.from_config(config), config.generation.temperature, 37.0, 2, compiled=compiled,
        **options)
    mx.eval(loss, logps, metrics, grads)
    return loss.item(), np.array(logps), {k: v.item() for k, v in metrics.items()}, dict(tree_flatten(grads))


def assert_same(got, want, atol=1e-5):
    assert got[0] == pytest.approx(want[0], rel=1e-5, abs=1e-7)
    np.testing.assert_allclose(got[1], want[1], atol=atol)
    for name, value in want[2].items():
        assert got[2][name] == pytest.approx(value, abs=1e-5), name
    assert got[3].keys() == want[3].keys()
    for name, g in want[3].items():
        np.testing.assert_allclose(np.array(got[3][name]), np.array(g), atol=1e-6, rtol=1e-4, err_msg=name)


def sgd_update(model, config, plan, batches, optimizer=None):
    # Plain SGD: AdamW's first step is lr·sign(gradient), which turns float noise on a near-zero
    # gradient into a full-size difference; SGD's step is the gradient itself.
    result = optimize_pass(model, optimizer or optim.SGD(learning_rate=1.0), batches, config, plan, record_old=True)
    return result, dict(tree_flatten(model.trainable_parameters())), [np.array(b.old_logps) for b in batches]


def head_gradient_peak(in_place: bool, limit_above_inputs: int | None = None) -> int:
    """Peak bytes above its inputs of a 32,768 × 512 fused head's gradient on 768 positions (chunks of
    256: 32 MB of logits each); ``limit_above_inputs``: MLX's memory limit that far above them."""
    vocabulary, width, positions, chunk = 32_768, 512, 768, 256
    keys = mx.random.split(mx.random.key(7), 3)
    weight = mx.random.normal((vocabulary, width), key=keys[0]) * 0.02
    hidden = mx.random.normal((positions, width), key=keys[1])
    targets = mx.random.randint(0, vocabulary, (positions,), key=keys[2])
    mx.eval(weight, hidden, targets)
    fused = chunked_head._function(chunk, 1.0, True, None, in_place)
    gradient = mx.grad(lambda w, h: mx.sum(fused(h, (w,), targets)[0]), argnums=(0, 1))
    mx.eval(gradient(weight, hidden))  # compiled kernels built before the measurement
    mx.synchronize()
    mx.reset_peak_memory()
    base = mx.get_active_memory()
    previous = mx.set_memory_limit(base + limit_above_inputs) if limit_above_inputs is not None else None
    try:
        mx.eval(gradient(weight, hidden))
    finally:
        if previous is not None:
            mx.set_memory_limit(previous)
    return mx.get_peak_memory() - base


def loss_and_grad(*args, **kwargs):
    """((loss, stop_gradient(logps), metrics), gradients) of one micro-batch, a tied embedding's
    lookup gradient folded in: ``loss.loss_grad_parts`` as one call (arguments as its)."""
    value, gradients, lookup = loss_step.loss_grad_parts(*args, **kwargs)
    return value, gradients if lookup is None else tied_embedding.fold(gradients, [lookup])


def host_head_of(model) -> Head:
    """The plan's numpy head for ``model``: the head too when it is a plain one."""
    return Head.HOST_HEAD if chunked_head.plain_weight(model) is not None else Head.HOST_VOCAB
