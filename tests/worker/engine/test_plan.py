"""The engine plan: every switch turns its path off, and the log line (``describe``) says so."""

import ast
import dataclasses
import os

import pytest

from grpo_tui.protocol.config import GenerationConfig, ModelConfig, parse_config
from grpo_tui.worker.engine.models import model_io, plan as engine_plan
from grpo_tui.worker.engine.policy import rollout
from grpo_tui.worker.engine.learning import update
from grpo_tui.worker.engine.accel import cpu_fast, fastgen, host_sampling, host_vocab, memory
from grpo_tui.worker.engine.learning.batch import pack
from grpo_tui.worker.engine.models.plan import Head
from grpo_tui.worker.engine.learning.update import make_optimizer, optimize_pass
from tests.helpers.tiny_model import build_tiny_model
from tests.helpers.loss_cases import STREAMS_CONFIG, stream_batch

CONFIG_DAPO = STREAMS_CONFIG.format(loss_type="dapo")


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    return model_io.load(ModelConfig(path=str(build_tiny_model(tmp_path_factory.mktemp("tiny")))))


def _plan(model, off=(), **env):
    environ = {engine_plan.SWITCHES[name]: "0" for name in off} | env
    return engine_plan.decide(model, parse_config(CONFIG_DAPO, check_paths=False), environ=environ)


@pytest.mark.parametrize("name", ["fast_rollout", "shared_prompt", "compiled_loss", "two_streams", "cpu_kernels"])
def test_each_switch_turns_its_path_off_and_the_log_says_so(loaded, name):
    on, off = _plan(loaded[0]), _plan(loaded[0], off=[name])
    if name == "cpu_kernels" and not cpu_fast.enabled():
        pytest.skip("the x86 CPU kernels apply to x86-64 CPUs only")
    assert getattr(on, name) and not getattr(off, name)
    assert on.describe() != off.describe()


def test_the_host_vocabulary_switch(loaded, monkeypatch):
    monkeypatch.setattr(host_vocab, "MIN_VOCABULARY", 2)
    on, off = _plan(loaded[0], off=["compiled_loss"]), _plan(loaded[0], off=["compiled_loss", "host_vocab"])
    # A plain head: the head goes to numpy with the log-softmax.
    assert on.head is Head.HOST_HEAD and off.head not in (Head.HOST_HEAD, Head.HOST_VOCAB)
    assert "LM head and vocabulary log-softmax in numpy" in on.describe() and "vocabulary entries at a time" in on.describe()
    assert "log-softmax in numpy" not in off.describe()
    quantized = dataclasses.replace(on, head=Head.HOST_VOCAB)  # what a head the host head cannot take gets
    assert "vocabulary log-softmax in numpy" in quantized.describe() and "positions at a time" in quantized.describe()


def test_a_large_vocabulary_on_the_cpu_keeps_the_loss_eager_for_the_numpy_log_softmax(loaded, monkeypatch):
    monkeypatch.setattr(host_vocab, "MIN_VOCABULARY", 2)  # the tiny model's vocabulary counts as large
    plan = _plan(loaded[0])
    assert plan.head is Head.HOST_HEAD and not plan.compiled_loss
    assert _plan(loaded[0], off=["host_vocab"]).compiled_loss


def test_a_large_model_keeps_mlx_s_log_softmax(loaded, monkeypatch):
    """The numpy log-softmax evaluates the logits inside the gradient transform, which keeps every
    block's intermediates alive: a large model (here: every model above 0 parameters) does without."""
    monkeypatch.setattr(host_vocab, "MIN_VOCABULARY", 2)
    assert _plan(loaded[0], off=["compiled_loss"]).head is Head.HOST_HEAD
    monkeypatch.setattr(engine_plan, "SMALL_MODEL_PARAMETERS", 0)
    plan = _plan(loaded[0], off=["compiled_loss"])
    assert "numpy," not in plan.describe()
    # Its log-softmax is the fused head's single exp instead, unless switched off.
    assert plan.head is Head.FUSED and "LM head and log-softmax fused" in plan.describe()
    assert _plan(loaded[0], off=["compiled_loss", "fused_head"]).head is Head.MLX


def test_the_fused_head_is_for_eager_losses_without_the_numpy_log_softmax(loaded, monkeypatch):
    plan = _plan(loaded[0])  # a small vocabulary: the compiled loss, whose trace keeps MLX's own ops
    assert plan.compiled_loss and plan.head is Head.MLX
    assert _plan(loaded[0], off=["compiled_loss"]).head is Head.FUSED  # eager: fused
    monkeypatch.setattr(host_vocab, "MIN_VOCABULARY", 2)
    assert _plan(loaded[0], off=["compiled_loss"]).head is Head.HOST_HEAD  # the numpy log-softmax runs


def test_the_host_sampling_switch_and_the_rollout_draws_where_planned(loaded, monkeypatch):
    model, tokenizer = loaded
    assert not _plan(model).host_sampling  # a 261-token vocabulary: MLX's own draw
    assert "sampling: keyed Gumbel-max in MLX" in _plan(model).describe()
    monkeypatch.setattr(host_vocab, "MIN_VOCABULARY", 2)
    on, off = _plan(model), _plan(model, off=["host_sampling"])
    assert on.host_sampling and not off.host_sampling
    assert "sampling: keyed inverse-CDF in numpy" in on.describe() and "Gumbel" in off.describe()
    draws = []
    real = host_sampling.draw
    monkeypatch.setattr(host_sampling, "draw", lambda *a, **k: draws.append(1) or real(*a, **k))
    gen = GenerationConfig(max_completion_length=4)
    for plan in (on, off):
        out = rollout.generate(model, tokenizer, [[5, 6, 7]], 2, gen, plan=plan, keys=[1, 2])
        assert [len(c.token_ids) for c in out] == [4, 4]
    assert len(draws) == 4  # one host draw per position, only on the planned path


def test_without_the_shared_prompt_there_is_no_compiled_loss(loaded):
    plan = _plan(loaded[0], off=["shared_prompt"])
    assert not plan.compiled_loss and "compiled loss" not in plan.describe()
    batch = pack([[5, 6, 7]] * 4, [[8, 9]] * 4, [0.0] * 4, [True] * 4, group=plan.pack_group(4))
    assert batch.prompts is None
    assert pack([[5, 6, 7]] * 4, [[8, 9]] * 4, [0.0] * 4, [True] * 4, group=_plan(loaded[0]).pack_group(4)).prompts is not None


@pytest.mark.parametrize("off", [(), ("fast_rollout",), ("cpu_kernels",)])
def test_the_rollout_takes_the_planned_path(loaded, monkeypatch, off):
    model, tokenizer = loaded
    plan = _plan(model, off=off)
    calls = []
    real_fast, real_slow = fastgen.generate_tokens, rollout._batch_generator
    monkeypatch.setattr(fastgen, "generate_tokens", lambda *a, **k: calls.append(("fast", k["fast_exp"])) or real_fast(*a, **k))
    monkeypatch.setattr(rollout, "_batch_generator", lambda *a, **k: calls.append(("slow", None)) or real_slow(*a, **k))
    rollout.generate(model, tokenizer, [[5, 6, 7]], 2, GenerationConfig(max_completion_length=4), plan=plan)
    assert calls == ([("slow", None)] if "fast_rollout" in off else [("fast", plan.cpu_kernels)])


@pytest.mark.parametrize("off", [("compiled_loss",), ("compiled_loss", "two_streams"), ("compiled_loss", "host_vocab")])
def test_the_update_takes_the_planned_path(loaded, monkeypatch, off):
    monkeypatch.setattr(host_vocab, "MIN_VOCABULARY", 2)
    model = loaded[0]
    plan = _plan(model, off=off)
    config = parse_config(CONFIG_DAPO, check_paths=False)
    seen = []
    real = update.loss_grad_parts
    monkeypatch.setattr(update, "loss_grad_parts", lambda *a, **k: seen.append((k["compiled"], k["head"], k["whole"] is not None)) or real(*a, **k))
    optimize_pass(model, make_optimizer(config), [stream_batch(model.args.vocab_size, 3, 2)], config, plan, record_old=False)
    assert {s[0] for s in seen} == {False}
    assert {s[1] for s in seen} == {plan.head}
    assert (plan.head is Head.HOST_HEAD) == ("host_vocab" not in off)
    assert {s[2] for s in seen} == {plan.two_streams} == {"two_streams" not in off}


def test_the_compiled_loss_runs_when_planned(loaded, monkeypatch):
    model = loaded[0]
    plan = _plan(model)
    config = parse_config(CONFIG_DAPO, check_paths=False)
    seen = []
    real = update.loss_grad_parts
    monkeypatch.setattr(update, "loss_grad_parts", lambda *a, **k: seen.append(k["compiled"]) or real(*a, **k))
    optimize_pass(model, make_optimizer(config), [stream_batch(model.args.vocab_size, 3, 2)], config, plan, record_old=False)
    assert plan.compiled_loss and set(seen) == {True} and "compiled loss" in plan.describe()


def test_the_freed_memory_switch_never_calls_mallopt(monkeypatch):
    calls = []
    monkeypatch.setattr(memory, "keep_freed_memory", lambda: calls.append(1) or True)
    assert engine_plan.prepare_process({"GRPO_TUI_KEEP_FREED_MEMORY": "0"}) is False and calls == []
    assert engine_plan.prepare_process({}) is True and calls == [1]


def test_switches_are_read_only_by_the_plan(root):
    for file in (root / "worker").rglob("*.py"):
        if file.name == "plan.py":
            continue
        tree = ast.parse(file.read_text())
        names = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
        assert not names & set(engine_plan.SWITCHES.values()), file
        environ = [n for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr == "environ"]
        # ranks, distributed: MLX_RANK (set by mlx.launch); dataset_sources: the hub's own HF_* variables;
        # loop: the Python API's step barrier (protocol/control.STEP_BARRIER_ENV), a contract, not a switch;
        # [async]'s learner_side, generator and wire: the generator's ring (MLX_RANK, MLX_HOSTFILE) and link secret
        assert not environ or file.name in ("ranks.py", "distributed.py", "dataset_sources.py", "loop.py",
                                            "learner_side.py", "generator.py", "wire.py"), file


def test_the_memory_fit_is_part_of_the_decision(loaded):
    """``memory_limit_gb`` picks the switches inside ``decide``: the plan says what runs, and the
    trainer applies it as it is."""
    model = loaded[0]
    config = parse_config(CONFIG_DAPO + "memory_limit_gb = 0.0001\n", check_paths=False)
    with pytest.raises(Exception, match="memory_limit_gb"):
        engine_plan.decide(model, config, prompt_tokens=8)
    roomy = parse_config(CONFIG_DAPO + "memory_limit_gb = 64\n", check_paths=False)
    plan = engine_plan.decide(model, roomy, prompt_tokens=8)
    assert plan.memory_fit is not None and plan.memory_fit.startswith("memory_limit_gb = 64")
    assert not plan.compiled_loss  # a memory budget keeps the loss eager


def test_async_processes_run_one_blas_thread_and_one_stream_each_and_a_users_own_setting_wins(monkeypatch):
    """[async]'s learner and generator share the cores: each takes one (bench/README.md, "async_grpo.py")."""
    monkeypatch.delenv("MKL_NUM_THREADS", raising=False)
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    engine_plan.prepare_process(parameters=10**9)
    assert "MKL_NUM_THREADS" not in os.environ  # one process: BLAS keeps its threads
    engine_plan.prepare_process(parameters=10**9, sharing_cores=True)
    assert os.environ["MKL_NUM_THREADS"] == "1" and os.environ["OMP_NUM_THREADS"] == "2"
