"""``training.steps_per_generation`` (TRL's generation reuse): one generation feeds a block of steps,
each step trains its own prompts, the later ones off-policy against the policy that sampled them."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest

from grpo_tui.common.live_settings import NOT_LIVE
from grpo_tui.protocol.config import ConfigError, load_config
from grpo_tui.worker.engine import generation_reuse
from grpo_tui.worker.engine.learning.grpo import group_advantages
from grpo_tui.worker.engine.learning.logps import token_logps
from grpo_tui.worker.engine.stepwise import Engine, EngineError
from grpo_tui.worker.engine.trainer import MlxTrainer
from tests.helpers.tiny_model import build_tiny_model, write_config

BASE = """
[grpo]
group_size = 4
{grpo}
[generation]
max_completion_length = 8
[training]
batch_size = 4
learning_rate = 3e-2
max_steps = 5
{training}
"""


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return build_tiny_model(tmp_path_factory.mktemp("tiny"))


def make(tmp_path, model_dir, grpo: str = "", training: str = "steps_per_generation = 3") -> MlxTrainer:
    path = write_config(tmp_path, model_dir, BASE.format(grpo=grpo, training=training))
    return MlxTrainer(load_config(path), log=lambda level, msg: None)


def test_a_block_runs_to_its_end_or_the_runs():
    assert list(generation_reuse.block(1, 3, 10)) == [1, 2, 3]
    assert list(generation_reuse.block(2, 3, 10)) == [2, 3]  # a resume inside a block: its remaining steps
    assert list(generation_reuse.block(7, 3, 8)) == [7, 8]  # the run ends inside the block
    assert list(generation_reuse.block(4, 1, 10)) == [4]


def test_the_first_step_of_a_block_generates_for_the_block_and_the_others_only_train(tmp_path, model_dir):
    reused = make(tmp_path / "a", model_dir)
    fresh = make(tmp_path / "b", model_dir, training="")  # the same run, a generation per step
    # what the untrained policy samples for step 2's prompts with step 2's keys
    prompts = [reused.prompts.dataset[i].prompt_ids for i in reused.batch(2)[2]]
    expected_step2 = [c.text for c in fresh.policy.roll_out(2, prompts, list(range(len(prompts))))]
    phases = {}
    outputs = {}
    for step in range(1, 6):
        seen: list[str] = []
        outputs[step] = reused.train_step(step, seen.append)
        phases[step] = seen
    # one rollout for the block's three steps, each step's scoring, then step 1's training
    assert phases[1] == ["generating", "scoring", "scoring", "scoring", "training"]
    assert phases[2] == phases[3] == ["training"]
    assert phases[4] == ["generating", "scoring", "scoring", "training"] and phases[5] == ["training"]  # cut at max_steps
    # step 2 trained the completions the policy sampled at step 1, for step 2's own prompts
    assert [g.raw_completion for g in outputs[2].generations] == expected_step2
    # each step trains its own batch, in the data order of a run without reuse
    for step in range(1, 6):
        assert [g.prompt for g in outputs[step].generations][::4] == [fresh.prompts.dataset[i].prompt_text for i in fresh.batch(step)[2]]


def test_later_steps_train_against_the_sampling_policys_log_probabilities(tmp_path, model_dir):
    trainer = make(tmp_path, model_dir, training="steps_per_generation = 2")
    before = make(tmp_path / "b", model_dir, training="steps_per_generation = 2")  # the untrained policy
    trainer.train_step(1)
    held = trainer.held[2]
    for batch in held.batches:
        sampling = token_logps(before.policy.model, batch, 1.0, trainer.policy.plan.head, trainer.policy.plan.vocab_chunk_size).logps
        now = token_logps(trainer.policy.model, batch, 1.0, trainer.policy.plan.head, trainer.policy.plan.vocab_chunk_size).logps
        mask = np.array(batch.mask) > 0
        np.testing.assert_allclose(np.array(batch.old_logps)[mask], np.array(sampling)[mask], atol=1e-5)
        assert np.abs(np.array(now) - np.array(batch.old_logps))[mask].max() > 1e-3  # step 1 moved the policy
    out = trainer.train_step(2)
    assert out.metrics.gradients_applied


def test_batch_scaled_advantages_span_the_generation(tmp_path, model_dir):
    trainer = make(tmp_path, model_dir, grpo='scale_rewards = "batch"', training="steps_per_generation = 2")
    out1 = trainer.train_step(1)
    held = trainer.held[2]
    totals = [g.reward for g in out1.generations] + [t for t in held.selection.totals]
    expected = np.array(group_advantages(totals, 4, "batch"))
    np.testing.assert_allclose([g.advantage for g in out1.generations], expected[:16], atol=1e-5)
    np.testing.assert_allclose(np.array(held.advantages), expected[16:], atol=1e-5)


def test_the_batch_normalised_losses_divide_by_the_generations_tokens_per_step(tmp_path, model_dir):
    trainer = make(tmp_path, model_dir, grpo='loss_type = "dapo"', training="steps_per_generation = 2")
    trainer.parts.begin_step(1)
    shares = generation_reuse.generate(trainer.parts, 1, lambda phase: None)
    first, second = shares[1], shares[2]
    tokens = [sum(float(mx.sum(b.mask).item()) for b in held.batches) for held in (first, second)]
    assert tokens[0] != tokens[1]  # else the test could not tell a step's count from the mean
    assert first.num_items == second.num_items == pytest.approx(sum(tokens) / 2)


def test_several_iterations_keep_the_sampling_policys_log_probabilities(tmp_path, model_dir):
    trainer = make(tmp_path, model_dir, grpo="num_iterations = 2", training="steps_per_generation = 2")
    trainer.train_step(1)
    batches = trainer.held[2].batches
    recorded = [np.array(b.old_logps) for b in batches]
    trainer.train_step(2)  # its first pass must not overwrite them with its own policy's
    for batch, old in zip(batches, recorded):
        np.testing.assert_array_equal(np.array(batch.old_logps), old)


def test_its_mistakes_are_sentences(tmp_path, model_dir):
    with pytest.raises(ConfigError, match="training.steps_per_generation: 0 must be at least 1"):
        load_config(write_config(tmp_path / "a", model_dir, BASE.format(grpo="", training="steps_per_generation = 0")))
    with pytest.raises(ConfigError, match="set steps_per_generation = 1 or dynamic_sampling = false"):
        load_config(write_config(tmp_path / "b", model_dir, BASE.format(grpo="dynamic_sampling = true",
                                                                        training="steps_per_generation = 2")))
    assert "training.steps_per_generation" in NOT_LIVE
    with pytest.raises(EngineError, match="steps_per_generation = 2"):
        Engine(load_config(write_config(tmp_path / "c", model_dir, BASE.format(grpo="", training="steps_per_generation = 2"))))
