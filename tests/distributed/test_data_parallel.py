"""Two local ranks (mlx.launch, ring backend) train exactly like one rank on the same global batch:
the same sampled tokens, loss and metrics per step, and the same final weights on every rank."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.distributed.launch import ROOT, run_ranks
from tests.helpers.tiny_model import write_config
from tests.helpers.worker_harness import tiny_model  # noqa: F401 - the fixture

SCRIPT = str(ROOT / "tests" / "distributed" / "train_ranks.py")
STEPS = 2


def _train(config: Path, out: Path, ranks: int) -> None:
    out.mkdir()
    run_ranks(ranks, SCRIPT, str(config), str(out), str(STEPS))


def _load(out: Path, rank: int) -> tuple[dict, dict[str, np.ndarray]]:
    report = json.loads((out / f"rank-{rank}.json").read_text())
    weights = np.load(out / f"rank-{rank}.npz")
    return report, {k: weights[k] for k in weights.files}


SETTINGS = {
    # SAPO's soft gates (TRL 1.16), the batch-wide reward scale, clipping that binds
    "sapo-batch": 'loss_type = "sapo"\nscale_rewards = "batch"',
    # per-micro-batch token denominators, the KL to a reference, two passes with recorded old log-probs
    "bnpo-beta-iterations": 'loss_type = "bnpo"\nbeta = 0.05\nnum_iterations = 2',
    # the reference synced after every step on each rank alike (TR-DPO): step 2's KL is to the synced one
    "beta-sync-ref": 'loss_type = "dapo"\nbeta = 0.05\nsync_ref_model = true\nref_model_sync_steps = 1',
    # TRL 1.16's losses: CISPO's global token count and clipped weights off-policy (a second pass); LUSPO
    # at sequence level with the off-policy mask and the importance-weighted KL
    "cispo-iterations": 'loss_type = "cispo"\nepsilon_high = 1.05\nnum_iterations = 2',
    "luspo-sequence-masked": ('loss_type = "luspo"\nimportance_sampling_level = "sequence"\nbeta = 0.05\n'
                              'use_bias_correction_kl = true\noff_policy_mask_threshold = 0.01\nnum_iterations = 2'),
    # TRL's adaptive entropy bonus: each micro-batch's mean entropy, and the coefficient moved by every
    # rank's tokens' entropy (applied from step 2: below the target)
    "grpo-adaptive-entropy": ('loss_type = "grpo"\nentropy_coef = 0.05\nuse_adaptive_entropy = true\n'
                              'entropy_target = 100.0\nentropy_coef_delta = 0.05'),
    # one generation for both steps (TRL's steps_per_generation): step 2 trains off-policy against
    # the sampling policy's log-probabilities, each rank its micro-batches'; VESPO's weights over the
    # generation's tokens per step (TRL 1.16)
    "vespo-reused-generation": 'loss_type = "vespo"\nscale_rewards = "batch"',
}
TRAINING = {"vespo-reused-generation": "steps_per_generation = 2"}  # [training] keys beside the shared ones


@pytest.mark.parametrize("name", list(SETTINGS))
def test_two_ranks_equal_one_rank(tmp_path, tiny_model, name):
    extra = f"""
[grpo]
group_size = 4
{SETTINGS[name]}

[generation]
max_completion_length = 8
temperature = 1.0

[training]
batch_size = 4
gradient_accumulation_steps = 2
learning_rate = 1e-2
max_grad_norm = 0.5
{TRAINING.get(name, "")}
"""
    config = write_config(tmp_path, tiny_model, extra)
    _train(config, tmp_path / "one", 1)
    _train(config, tmp_path / "two", 2)
    one, w1 = _load(tmp_path / "one", 0)
    assert one["size"] == 1 and one["moved"] > 1e-4  # the run really trained
    for rank in (0, 1):
        two, w2 = _load(tmp_path / "two", rank)
        assert two["size"] == 2
        for a, b in zip(one["metrics"], two["metrics"], strict=True):
            assert a["tokens"] == b["tokens"]  # rank-independent sampling
            for key in a:
                if key != "tokens" and a[key] is not None:
                    assert b[key] == pytest.approx(a[key], rel=1e-4, abs=1e-6), key
        assert w1.keys() == w2.keys()
        for key in w1:
            np.testing.assert_allclose(w2[key], w1[key], rtol=1e-4, atol=1e-6, err_msg=key)


def test_dynamic_sampling_on_two_ranks_equals_one_rank(tmp_path, tiny_model):
    """Both ranks see every round whole (gathered), so they decide the same rounds and drops, and
    the extra rounds' rows draw from keys of the step, not of the rank."""
    (tmp_path / "split.py").write_text(
        "def split(prompts, completions, **kwargs):\n"
        "    return [0.5 if int(p[0]) % 2 else len(c) + len(set(c)) / 10 for p, c in zip(prompts, completions)]\n")
    extra = f"""
[grpo]
group_size = 4
dynamic_sampling = true
max_sampling_rounds = 4

[generation]
max_completion_length = 8

[training]
batch_size = 4
gradient_accumulation_steps = 2
learning_rate = 1e-2

[[rewards]]
function = "{tmp_path / 'split.py'}:split"
"""
    config = write_config(tmp_path, tiny_model, extra)
    _train(config, tmp_path / "one", 1)
    _train(config, tmp_path / "two", 2)
    one, w1 = _load(tmp_path / "one", 0)
    assert any(m["extra"]["sampling/rounds"] > 1 for m in one["metrics"])
    assert any(any(m["dropped"]) for m in one["metrics"]) and one["moved"] > 1e-4
    for rank in (0, 1):
        two, w2 = _load(tmp_path / "two", rank)
        for a, b in zip(one["metrics"], two["metrics"], strict=True):
            assert (a["tokens"], a["dropped"], a["extra"]) == (b["tokens"], b["dropped"], b["extra"])
            assert b["loss"] == pytest.approx(a["loss"], rel=1e-4, abs=1e-6)
        for key in w1:
            # two steps of summed float32 gradients in another order: 2e-6 apart at most
            np.testing.assert_allclose(w2[key], w1[key], rtol=1e-4, atol=5e-6, err_msg=key)


def test_an_agent_step_on_two_ranks_equals_one_rank(tmp_path):
    """The agent demo's model and calculator: rows call the tool at different times, each draws at
    its own positions from its own key, so the ranks' halves sample what one rank samples."""
    examples = ROOT / "examples"
    config = tmp_path / "config.toml"
    config.write_text(f"""
[model]
path = "{examples / 'models' / 'tiny-agent'}"

[data]
path = "{examples / 'data' / 'mul.jsonl'}"

[[tools]]
function = "{examples / 'tools' / 'calculator.py'}:multiply"

[[rewards]]
name = "accuracy"

[grpo]
group_size = 4
loss_type = "dapo"

[generation]
max_completion_length = 96
max_tool_calls = 2
temperature = 1.0

[training]
batch_size = 4
gradient_accumulation_steps = 2
learning_rate = 1e-3

[checkpoint]
output_dir = "run"
""")
    _train(config, tmp_path / "one", 1)
    _train(config, tmp_path / "two", 2)
    one, w1 = _load(tmp_path / "one", 0)
    turns = [t for m in one["metrics"] for t in m["tokens"]]
    assert any("<|im_start|>tool" in t for t in turns) and not all("<|im_start|>tool" in t for t in turns)
    for rank in (0, 1):
        two, w2 = _load(tmp_path / "two", rank)
        for a, b in zip(one["metrics"], two["metrics"], strict=True):
            assert a["tokens"] == b["tokens"]
            assert b["loss"] == pytest.approx(a["loss"], rel=1e-4, abs=1e-6)
        for key in w1:
            np.testing.assert_allclose(w2[key], w1[key], rtol=1e-4, atol=1e-6, err_msg=key)


@pytest.mark.parametrize("strategy", ["pass_rate", "levels"])
def test_a_curriculum_on_two_ranks_draws_what_one_rank_draws(tmp_path, tiny_model, strategy):
    """Every rank observes the gathered scores, so every rank's curriculum draws the same prompts
    (the second epoch's from the pass rates of the first); the data's ``level`` column serves
    ``levels``."""
    extra = f"""
[grpo]
group_size = 4

[generation]
max_completion_length = 8

[training]
batch_size = 4
gradient_accumulation_steps = 2
learning_rate = 1e-2

[curriculum]
strategy = "{strategy}"
revisit_probability = 0.25
"""
    config = write_config(tmp_path, tiny_model, extra)
    steps = 6  # 16 prompts, 4 a step: steps 5 and 6 draw by the first epoch's pass rates
    for ranks, out in ((1, tmp_path / "one"), (2, tmp_path / "two")):
        out.mkdir()
        run_ranks(ranks, SCRIPT, str(config), str(out), str(steps))
    one, _ = _load(tmp_path / "one", 0)
    assert any(m["extra"]["curriculum/too_hard"] + m["extra"]["curriculum/solved"] > 0 for m in one["metrics"])
    for rank in (0, 1):
        two, _ = _load(tmp_path / "two", rank)
        for a, b in zip(one["metrics"], two["metrics"], strict=True):
            assert (a["rows"], a["tokens"], a["visits"], a["extra"]) == (b["rows"], b["tokens"], b["visits"], b["extra"])
