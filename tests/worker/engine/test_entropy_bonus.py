"""TRL 1.16's entropy bonus (``grpo.entropy_coef``) differentiates the entropy on every head path
the plan can pick: MLX's log-softmax, the numpy log-softmax (``host_vocab``), the numpy head
(``host_head``), the chunked and the fused head, whole and in row parts; each path's loss and
gradients equal MLX's autograd of ``lse - Σ p·z``, and the bonus really moves the gradient. (The
loss itself against TRL's code: test_loss_types.py.)"""

import dataclasses

import numpy as np
import pytest

from grpo_tui.protocol.config import parse_config
from grpo_tui.worker.engine.models import plan as engine_plan
from grpo_tui.worker.engine.models.plan import Head
from tests.helpers.loss_cases import SWITCH_CONFIG, assert_same, grads, sgd_update, small_model, switch_batch


def bonus_config(loss_type: str = "grpo", grpo: str = "entropy_coef = 0.5", training: str = ""):
    text = SWITCH_CONFIG.format(loss_type=loss_type, training=training).replace("[grpo]\n", f"[grpo]\n{grpo}\n")
    return parse_config(text, check_paths=False)


HEADS = {"host-vocab": {"head": Head.HOST_VOCAB}, "host-head": {"head": Head.HOST_HEAD},
         "chunked": {"head": Head.CHUNKED, "vocab_chunk": 7}, "fused": {"head": Head.FUSED}}


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
@pytest.mark.parametrize("name", list(HEADS))
def test_every_head_path_differentiates_the_entropy_as_mlx_does(name, lora):
    model, config = small_model(lora, tie=name != "host-head"), bonus_config()
    batch = switch_batch(5, 2)
    want = grads(model, batch, config, entropy_coef=2.0)
    assert_same(grads(model, batch, config, entropy_coef=2.0, **HEADS[name]), want)
    without = grads(model, batch, config, entropy_coef=0.0)
    moved = max(float(np.abs(np.array(want[3][k]) - np.array(without[3][k])).max()) for k in want[3])
    assert moved > 1e-4  # the bonus's gradient is there
    assert want[0] == pytest.approx(without[0] - 2.0 * want[2]["bonus_entropy"] / want[2]["bonus_tokens"] / 2, rel=1e-5)


def test_a_pass_in_row_parts_adds_up_and_moves_the_adaptive_coefficient():
    """``logprob_batch_size``'s parts give the whole micro-batch's bonus; the pass logs TRL's
    ``entropy_coef`` (moved after it) and ``policy_loss``."""
    grpo = "entropy_coef = 0.1\nuse_adaptive_entropy = true\nentropy_target = 100.0\nentropy_coef_delta = 0.05"
    results = []
    for training in ("", "logprob_batch_size = 2"):
        config = bonus_config("dapo", grpo, training)
        model = small_model(False)
        plan = dataclasses.replace(engine_plan.decide(model, config), compiled_loss=False, two_streams=False)
        results.append(sgd_update(model, config, plan, [switch_batch(6, 2)])[0])
    whole, parts = results
    assert parts.loss == pytest.approx(whole.loss, rel=1e-5)
    for key in ("entropy_coef", "policy_loss", "entropy"):
        assert parts.stats[key] == pytest.approx(whole.stats[key], rel=1e-5), key
    assert whole.stats["entropy_coef"] == pytest.approx(0.15)  # below the target: up by delta
    assert "bonus_entropy" not in whole.stats


def test_the_plan_keeps_the_bonus_s_loss_eager():
    """A compiled trace of the bonus fails inside MLX 0.32; the plan runs it eager."""
    model = small_model(False)
    assert engine_plan.decide(model, bonus_config(grpo="entropy_coef = 0.0")).compiled_loss
    assert not engine_plan.decide(model, bonus_config()).compiled_loss
    assert not engine_plan.decide(model, bonus_config(grpo="use_adaptive_entropy = true")).compiled_loss
