"""A small model's micro-batch split over the two CPU streams gives the same loss, log-probs,
metrics and gradients as the whole micro-batch on one stream, for every loss type and layout."""

import os
import subprocess
import sys

import mlx.core as mx
import numpy as np
import pytest
from mlx.utils import tree_flatten

from grpo_tui.protocol.config import ModelConfig, parse_config
from grpo_tui.worker.engine.models import model_io, plan as engine_plan
from grpo_tui.worker.engine.accel import two_cores
from grpo_tui.worker.engine.learning.batch import halves
from grpo_tui.worker.engine.learning.grpo import LossSettings
from grpo_tui.worker.engine.learning.update import make_optimizer, optimize_pass
from tests.helpers.loss_cases import STREAMS_CONFIG, loss_and_grad, stream_batch
from tests.helpers.tiny_model import build_tiny_model
from tests.helpers.same_update import assert_same_update

G = 4


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    return str(build_tiny_model(tmp_path_factory.mktemp("tiny")))


@pytest.fixture(scope="module")
def model(model_path):
    return model_io.load(ModelConfig(path=model_path))[0]


def _plan(model):
    return engine_plan.decide(model, parse_config(STREAMS_CONFIG.format(loss_type="bnpo"), check_paths=False))


def _grads_of(model, batch, config, whole=None):
    num_items = 37.0  # dapo's whole-batch token count: any fixed value
    (loss, logps, metrics), grads = loss_and_grad(model, batch, LossSettings.from_config(config), config.generation.temperature,
                                                            num_items, 2, compiled=False, whole=whole)
    mx.eval(loss, logps, metrics, grads)
    return loss.item(), np.array(logps), metrics, dict(tree_flatten(grads))


@pytest.mark.parametrize("loss_type", ["grpo", "bnpo", "dr_grpo", "dapo"])
@pytest.mark.parametrize("groups, group", [(3, G), (1, G), (2, 1)], ids=["groups", "one-group", "plain"])
def test_the_halves_add_up_to_the_whole(model, loss_type, groups, group):
    config = parse_config(STREAMS_CONFIG.format(loss_type=loss_type), check_paths=False)
    batch = stream_batch(model.args.vocab_size, 0, groups, group)
    parts = halves(batch)
    assert len(parts) == 2
    assert sum(p.targets.shape[0] for p in parts) == batch.targets.shape[0]

    whole = _grads_of(model, batch, config)
    split = [_grads_of(model, part, config, whole=batch) for part in parts]
    assert split[0][0] + split[1][0] == pytest.approx(whole[0], rel=1e-5, abs=1e-7)
    np.testing.assert_allclose(np.concatenate([split[0][1], split[1][1]]), whole[1], atol=1e-5)
    tokens = [s[2]["tokens"].item() for s in split]
    for name in ("clip_ratio_region", "kl"):
        weighted = sum(s[2][name].item() * t for s, t in zip(split, tokens)) / sum(tokens)
        assert weighted == pytest.approx(whole[2][name].item(), abs=1e-6)
    for name, g in whole[3].items():
        np.testing.assert_allclose(np.array(split[0][3][name] + split[1][3][name]), np.array(g), atol=1e-6,
                                   rtol=1e-4, err_msg=name)


def test_whole_groups_stay_together(model):
    batch = stream_batch(model.args.vocab_size, 1, 3)
    first, second = halves(batch)
    assert first.prompts.shape[0] == 2 and second.prompts.shape[0] == 1  # no prompt runs twice
    assert first.targets.shape[0] == 2 * G and second.targets.shape[0] == G
    np.testing.assert_array_equal(np.array(second.prompts), np.array(batch.prompts[2:]))


def test_an_update_on_two_streams_equals_one_on_one(model_path, monkeypatch):
    config = parse_config(STREAMS_CONFIG.format(loss_type="bnpo"), check_paths=False)
    updated = {}
    for switch in ("1", "0"):
        monkeypatch.setenv("GRPO_TUI_TWO_STREAMS", switch)
        model = model_io.load(ModelConfig(path=model_path))[0]
        model.train()
        plan = engine_plan.decide(model, config)
        assert plan.two_streams == (switch == "1")
        batches = [stream_batch(model.args.vocab_size, seed, 2) for seed in (3, 4)]
        result = optimize_pass(model, make_optimizer(config), batches, config, plan, record_old=True)
        updated[switch] = (result, dict(tree_flatten(model.parameters())), [np.array(b.old_logps) for b in batches])
    # lr 0.01: AdamW divides by sqrt(v), so a near-zero gradient summed in another order (two streams,
    # another BLAS) can move its update by a sizeable share of lr; 1e-4 is 1% of the step.
    assert_same_update(updated["1"], updated["0"], atol=1e-4)


def test_large_models_stay_on_one_stream(model, monkeypatch):
    assert _plan(model).two_streams
    monkeypatch.setattr(engine_plan, "SMALL_MODEL_PARAMETERS", 10)
    assert not _plan(model).two_streams


def test_each_stream_gets_half_the_blas_threads_inside_the_block_and_they_come_back():
    functions = two_cores._blas_thread_functions()
    if functions is None:
        pytest.skip("no MKL or OpenBLAS loaded in this process")
    get, put = functions
    before = get()
    try:
        for asked in (2, 1, 8):
            put(asked)
            threads = get()  # the library may cap it at the cores it sees
            with two_cores.half_the_blas_threads():
                assert get() == max(1, threads // 2)
            assert get() == threads
    finally:
        put(before)


def test_one_core_machines_keep_one_stream(model, monkeypatch):
    monkeypatch.setattr(engine_plan.os, "cpu_count", lambda: 1)
    assert not _plan(model).two_streams


@pytest.mark.parametrize("preset, parameters, expected", [(None, 10**6, "200"), (None, None, "200"), ("7", 10**6, "7"),
                                                         (None, 10**9, "unset"), ("7", 10**9, "7")])
def test_the_worker_widens_mlx_evaluation_order_for_a_small_model_unless_the_user_chose(preset, parameters, expected):
    env = {k: v for k, v in os.environ.items() if k != "MLX_BFS_MAX_WIDTH"}
    if preset is not None:
        env["MLX_BFS_MAX_WIDTH"] = preset
    code = ("import os; from grpo_tui.worker.engine.models import plan; "
            f"plan.prepare_process(parameters={parameters}); print(os.environ.get('MLX_BFS_MAX_WIDTH', 'unset'))")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == expected

