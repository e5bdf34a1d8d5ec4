"""The MlxTrainer contract on a tiny random Qwen3 model: step metrics, replay, accumulation,
the NaN guard, LoRA / full saving and checkpoint restore."""

import math

import mlx.core as mx
import numpy as np
import pytest
from mlx.utils import tree_flatten
from mlx_lm import generate as mlx_generate, load

from grpo_tui.protocol.config import load_config
from grpo_tui.worker.engine.learning import loss as loss_step
from grpo_tui.worker import trainer_contract
from grpo_tui.worker.engine.trainer import MlxTrainer
from tests.helpers.tiny_model import build_tiny_model, write_config
from grpo_tui.worker.engine.models.plan import Head

BASE = """
[grpo]
group_size = 4
[generation]
max_completion_length = 8
[training]
batch_size = 4
learning_rate = 1e-2
"""


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return build_tiny_model(tmp_path_factory.mktemp("tiny"))


def make(tmp_path, model_dir, extra=BASE):
    return MlxTrainer(load_config(write_config(tmp_path, model_dir, extra)), log=lambda level, msg: None)


def test_the_trainer_is_what_the_worker_loop_expects(tmp_path, model_dir):
    assert isinstance(make(tmp_path, model_dir), trainer_contract.Trainer)


def test_the_log_says_which_speed_paths_the_model_gets(tmp_path, model_dir):
    lines = []
    MlxTrainer(load_config(write_config(tmp_path, model_dir, BASE)), log=lambda level, msg: lines.append(msg))
    engine = next(line for line in lines if line.startswith("engine: "))
    assert "rollout: compiled loop, one prefill per prompt" in engine
    from grpo_tui.worker.engine.accel import cpu_fast
    assert ("its KV cache read once per group" in engine) == cpu_fast.enabled()  # x86: fastgen.SharedPromptCache
    assert "training: prompt once per group" in engine and "compiled loss" in engine
    assert "batch halves on two CPU streams" in engine
    lines.clear()
    MlxTrainer(load_config(write_config(tmp_path, model_dir, BASE.replace("[generation]", "[generation]\nrepetition_penalty = 1.1"))),
            log=lambda level, msg: lines.append(msg))
    assert "rollout: mlx-lm BatchGenerator" in next(line for line in lines if line.startswith("engine: "))


def test_the_log_says_when_the_vocabulary_goes_to_numpy(tmp_path, model_dir, monkeypatch):
    from grpo_tui.worker.engine.accel import host_vocab

    monkeypatch.setattr(host_vocab, "MIN_VOCABULARY", 2)  # the tiny model's vocabulary counts as large
    lines = []
    MlxTrainer(load_config(write_config(tmp_path, model_dir, BASE)), log=lambda level, msg: lines.append(msg))
    engine = next(line for line in lines if line.startswith("engine: "))
    assert "LM head and vocabulary log-softmax in numpy" in engine and "compiled loss" not in engine
    assert "the logits never exist whole" in engine


def test_a_step_on_the_host_head_trains_like_the_mlx_head(tmp_path, model_dir, monkeypatch):
    """What the engine line says runs: the step's head and log-softmax go through numpy
    (accel.host_head), with the MLX head's loss and gradient norm."""
    from grpo_tui.worker.engine.accel import host_head, host_vocab

    calls = []
    forward = host_head.forward
    monkeypatch.setattr(host_head, "forward", lambda *a: calls.append(1) or forward(*a))
    monkeypatch.setattr(host_head, "BLOCK", 7)  # the tiny vocabulary in several blocks
    (tmp_path / "spread.py").write_text("def spread(completions, **kw):\n"
                                        "    return [float(len(set(c))) for c in completions]\n")
    varied = BASE + f'[[rewards]]\nfunction = "{tmp_path / "spread.py"}:spread"\n'  # advantages that vary
    runs = {}
    for switch in ("1", "0"):
        monkeypatch.setenv("GRPO_TUI_HOST_VOCAB", switch)
        monkeypatch.setattr(host_vocab, "MIN_VOCABULARY", 2)
        monkeypatch.setenv("GRPO_TUI_COMPILED_LOSS", "0")  # the same eager loss on both sides
        trainer = make(tmp_path / switch, model_dir, varied)
        assert (trainer.policy.plan.head is Head.HOST_HEAD) == (switch == "1")
        runs[switch] = trainer.train_step(1).metrics
    assert calls and runs["0"].grad_norm > 0  # a real gradient to compare
    assert runs["1"].grad_norm == pytest.approx(runs["0"].grad_norm, rel=1e-4)
    assert runs["1"].loss == pytest.approx(runs["0"].loss, rel=1e-4, abs=1e-6)
    # (Each gradient is compared in test_host_head; AdamW's first step moves a weight by ~lr whatever
    # its gradient's size, so weights with a near-zero gradient are no comparison.)


def weights(trainer):
    return {k: np.array(v) for k, v in tree_flatten(trainer.policy.model.trainable_parameters())}


def test_batches_are_a_seeded_shuffle_of_each_epoch(tmp_path, model_dir):
    t = make(tmp_path, model_dir, BASE + "num_epochs = 2\nmax_steps = 7\n")
    assert (t.dataset_size, t.steps_per_epoch, t.total_steps) == (16, 4, 7)
    epoch0 = [t.batch(s) for s in range(1, 5)]
    assert [e[:2] for e in epoch0] == [(0, 1), (0, 2), (0, 3), (0, 4)]
    assert sorted(i for _, _, idx in epoch0 for i in idx) == list(range(16))
    assert [i for _, _, idx in epoch0 for i in idx] != list(range(16))
    assert t.batch(5)[:2] == (1, 1) and t.batch(5)[2] != t.batch(1)[2]
    assert t.batch(3) == t.batch(3)


def test_a_step_reports_every_metric_and_generation(tmp_path, model_dir):
    t = make(tmp_path, model_dir)
    phases = []
    before = weights(t)
    out = t.train_step(1, phases.append)
    m = out.metrics
    assert phases == ["generating", "scoring", "training"]
    assert len(out.generations) == 16
    assert [(g.prompt_index, g.group_index) for g in out.generations[:5]] == [(0, 0), (0, 1), (0, 2), (0, 3), (1, 0)]
    assert set(m.rewards) == {"accuracy", "length"}
    for name in ("loss", "reward", "reward_std", "frac_reward_zero_std", "advantage_std", "entropy",
                 "completion_mean_length", "completion_clipped_ratio", "generation_ms", "scoring_ms",
                 "training_ms", "generation_tokens_per_s", "training_tokens_per_s", "grad_norm",
                 "learning_rate", "peak_memory_mb", "active_memory_mb"):
        assert getattr(m, name) is not None and math.isfinite(getattr(m, name)), name
    assert m.kl is None  # beta = 0
    assert m.num_tokens > 16 * 1 and m.gradients_applied and m.skipped_reason is None
    g = out.generations[0]
    assert g.prompt.startswith("<|im_start|>user") and g.reward_details.keys() == {"accuracy", "length"}
    assert g.reward == pytest.approx(sum(v * w for v, w in zip(g.reward_details.values(), (1.0, 0.1))))
    # Advantages are centred per group.
    adv = np.array([g.advantage for g in out.generations]).reshape(4, 4)
    np.testing.assert_allclose(adv.sum(axis=1), 0, atol=1e-4)
    if m.grad_norm > 0:
        assert any(not np.array_equal(before[k], v) for k, v in weights(t).items())


def test_a_step_replays_exactly_from_the_same_state(tmp_path, model_dir):
    a, b = make(tmp_path / "a", model_dir), make(tmp_path / "b", model_dir)
    oa, ob = a.train_step(2), b.train_step(2)
    assert [g.raw_completion for g in oa.generations] == [g.raw_completion for g in ob.generations]
    assert oa.metrics.loss == ob.metrics.loss


def test_accumulation_gives_the_same_update_as_one_batch(tmp_path, model_dir):
    """dapo normalises by the whole batch's tokens, so two micro-batches = one batch."""
    one = make(tmp_path / "one", model_dir, BASE + "max_grad_norm = 0\n")
    two = make(tmp_path / "two", model_dir, BASE + "max_grad_norm = 0\ngradient_accumulation_steps = 2\n")
    for step in (1, 2, 3):
        m1, m2 = one.train_step(step).metrics, two.train_step(step).metrics
        assert m1.loss == pytest.approx(m2.loss, abs=1e-5)
        assert m1.grad_norm == pytest.approx(m2.grad_norm, rel=1e-3, abs=1e-6)
    w1, w2 = weights(one), weights(two)
    for k in w1:  # AdamW divides by sqrt(v): a near-zero gradient summed in another order moves by ~lr/10
        np.testing.assert_allclose(w1[k], w2[k], atol=1e-4)


def test_kl_and_several_iterations(tmp_path, model_dir):
    t = make(tmp_path, model_dir, BASE.replace("group_size = 4", "group_size = 4\nbeta = 0.1\nnum_iterations = 3"))
    metrics = [t.train_step(s).metrics for s in (1, 2, 3)]
    assert all(m.kl is not None and m.kl >= 0 for m in metrics)
    assert metrics[-1].kl > 0  # the policy has moved away from the frozen reference
    assert any(m.clip_ratio.region > 0 for m in metrics)  # later passes see ratios != 1


def test_masking_truncated_completions_removes_their_gradient(tmp_path, model_dir):
    t = make(tmp_path, model_dir, BASE.replace("[generation]", "[generation]\n").replace(
        "group_size = 4", "group_size = 4\nmask_truncated_completions = true"))
    t.policy.tokenizer.eos_token_ids = []  # no completion can stop: every one is truncated, whatever is sampled
    before = weights(t)
    m = t.train_step(1).metrics
    assert m.completion_clipped_ratio == 1.0
    assert m.loss == 0.0 and m.grad_norm == 0.0
    for k, v in weights(t).items():
        np.testing.assert_array_equal(before[k], v)


def test_non_finite_loss_skips_the_update(tmp_path, model_dir, monkeypatch):
    t = make(tmp_path, model_dir)
    real = loss_step.policy_loss
    monkeypatch.setattr(loss_step, "policy_loss", lambda *a, **k: (lambda l, m: (l * mx.array(math.nan), m))(*real(*a, **k)))
    before = weights(t)
    m = t.train_step(1).metrics
    assert not m.gradients_applied and "non-finite" in m.skipped_reason
    assert m.loss is None
    for k, v in weights(t).items():
        np.testing.assert_array_equal(before[k], v)


def test_full_model_saves_what_mlx_lm_loads_and_checkpoints_restore(tmp_path, model_dir):
    t = make(tmp_path, model_dir)
    t.train_step(1)
    t.train_step(2)
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    t.save_model(ckpt)
    t.save_optimizer(ckpt / "optimizer.safetensors")
    model, tokenizer = load(str(ckpt))
    saved = dict(tree_flatten(model.parameters()))
    for k, v in weights(t).items():
        np.testing.assert_array_equal(np.array(saved[k]), v)
    assert isinstance(mlx_generate(model, tokenizer, "2+3=", max_tokens=4), str)

    fresh = make(tmp_path / "fresh", model_dir)
    fresh.load_checkpoint(ckpt)
    assert int(fresh.learner.optimizer.state["step"]) == int(t.learner.optimizer.state["step"]) == 2
    a, b = t.train_step(3), fresh.train_step(3)
    assert [g.raw_completion for g in a.generations] == [g.raw_completion for g in b.generations]
    assert a.metrics.loss == pytest.approx(b.metrics.loss, abs=1e-6)
    for k, v in weights(t).items():
        np.testing.assert_allclose(weights(fresh)[k], v, atol=1e-6)


def test_lora_trains_only_adapters_and_saves_them(tmp_path, model_dir):
    t = make(tmp_path, model_dir, BASE + "\n[model.lora]\nrank = 4\nalpha = 8\nlayers = 1\n")
    names = set(weights(t))
    assert names and all(n.rsplit(".", 1)[-1] in ("lora_a", "lora_b") for n in names)
    assert all(n.startswith("model.layers.1.") for n in names)  # only the last block
    for step in (1, 2):
        t.train_step(step)
    out = tmp_path / "lora"
    out.mkdir()
    t.save_model(out)
    assert {"adapters.safetensors", "adapter_config.json", "config.json", "tokenizer.json"} <= {p.name for p in out.iterdir()}
    model, tokenizer = load(str(model_dir), adapter_path=str(out))
    loaded = dict(tree_flatten(model.trainable_parameters())) or dict(tree_flatten(model.parameters()))
    for k, v in weights(t).items():
        np.testing.assert_array_equal(np.array(loaded[k]), v)
    assert isinstance(mlx_generate(model, tokenizer, "2+3=", max_tokens=4), str)


@pytest.mark.parametrize("loss_type", ["dapo", "grpo"])
def test_grpo_raises_a_dense_custom_reward_within_a_few_steps(tmp_path, model_dir, loss_type):
    extra = BASE.replace("group_size = 4", f"group_size = 8\nloss_type = \"{loss_type}\"")
    path = write_config(tmp_path, model_dir, extra)
    path.write_text(path.read_text().replace('name = "accuracy"', 'function = "tests.worker.engine.test_trainer:digit_share"', 1))
    t = MlxTrainer(load_config(path), log=lambda level, msg: None)
    shares = [t.train_step(step).metrics.rewards["digit_share"] for step in range(1, 9)]
    assert shares[0] < 0.2 and min(shares[-2:]) > 0.6, shares


def digit_share(prompts, completions, **kw):
    """A dense custom reward for the learning check: the share of digits in the completion."""
    return [sum(ch.isdigit() for ch in c) / max(len(c), 1) for c in completions]


def test_the_optimizer_state_exists_before_the_first_step(tmp_path, model_dir):
    # Built inside the first update, AdamW's moments first counted in the second step's peak memory.
    t = make(tmp_path, model_dir)
    moments = dict(tree_flatten(t.learner.optimizer.state))
    for name, value in weights(t).items():
        assert moments[f"{name}.m"].shape == moments[f"{name}.v"].shape == value.shape
    before = set(moments)
    t.train_step(1)
    assert set(dict(tree_flatten(t.learner.optimizer.state))) == before  # the update allocates no new state


@pytest.mark.parametrize(("env", "extra", "head"), [
    ({}, "", Head.MLX),  # the compiled loss
    ({"GRPO_TUI_COMPILED_LOSS": "0", "GRPO_TUI_HOST_VOCAB": "0"}, "", Head.FUSED),
    ({"GRPO_TUI_COMPILED_LOSS": "0", "GRPO_TUI_HOST_VOCAB": "1"}, "", Head.HOST_HEAD),
    ({}, "vocab_chunk_size = 5\n", Head.CHUNKED),
])  # fmt: skip
def test_perplexity_and_token_accuracy_are_the_sampling_policys_on_the_trained_tokens(
        tmp_path, model_dir, monkeypatch, env, extra, head):
    """Against the model's own logits: exp of the mean token NLL and the share of top-1 tokens over
    the loss's tokens, under the weights that sampled them, on every head path of the plan."""
    from grpo_tui.worker.engine.learning import update
    from grpo_tui.worker.engine.accel import host_vocab
    from grpo_tui.worker.engine.learning.logps import batch_logits

    for name, value in env.items():
        monkeypatch.setenv(name, value)
    if head is Head.HOST_HEAD:
        monkeypatch.setattr(host_vocab, "MIN_VOCABULARY", 2)  # the tiny vocabulary counts as large
    seen = []
    original = update.loss_grad_parts
    monkeypatch.setattr(update, "loss_grad_parts", lambda model, batch, *a, **k: seen.append(batch) or original(model, batch, *a, **k))
    trainer = make(tmp_path, model_dir, BASE.replace("learning_rate = 1e-2", "learning_rate = 1e-2\n" + extra))
    assert trainer.policy.plan.head is head
    before, _ = load(str(model_dir))  # the weights that sampled step 1's completions
    metrics = trainer.train_step(1).metrics
    nll, top, tokens = 0.0, 0.0, 0.0
    for batch in seen:
        logits = np.array(batch_logits(before, batch).astype(mx.float32)) / trainer.parts.config.generation.temperature
        logp = logits - logits.max(-1, keepdims=True)
        logp -= np.log(np.exp(logp).sum(-1, keepdims=True))
        targets, mask = np.array(batch.targets), np.array(batch.mask)
        picked = np.take_along_axis(logp, targets[..., None], -1)[..., 0]
        nll -= (picked * mask).sum()
        top += ((picked >= logp.max(-1)) * mask).sum()
        tokens += mask.sum()
    assert tokens > 0 and 0 < metrics.token_accuracy < 1  # a random model: some top-1 tokens, not all
    assert metrics.perplexity == pytest.approx(math.exp(nll / tokens), rel=1e-4)
    assert metrics.token_accuracy == pytest.approx(top / tokens, abs=1e-6)
