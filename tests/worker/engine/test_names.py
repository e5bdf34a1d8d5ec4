"""Each list of names in the config contract is the list the engine implements, both ways."""

import typing

import mlx.core as mx
import pytest

from grpo_tui.protocol import config
from grpo_tui.worker.engine.learning import grpo
from grpo_tui.worker.engine.scoring import rewards


def test_loss_types_are_the_config_literal():
    literal = typing.get_args(typing.get_type_hints(config.GrpoConfig)["loss_type"])
    assert set(literal) == set(grpo.LOSS_TYPES)


@pytest.mark.parametrize("loss_type", grpo.LOSS_TYPES)
def test_every_loss_type_is_implemented(loss_type):
    settings = grpo.LossSettings(loss_type, 0.2, 0.28, max_completion_length=4)
    logps = mx.array([[-1.0, -2.0], [-0.5, -1.5]])
    loss, _ = grpo.policy_loss(logps, logps, mx.array([1.0, -1.0]), mx.ones((2, 2)), settings)
    assert loss.shape == ()


def test_builtin_rewards_are_the_registry():
    assert set(config.BUILTIN_REWARDS) == set(rewards.BUILTINS)
    assert all(callable(fn) for fn in rewards.BUILTINS.values())


def _literal(struct: type, key: str) -> tuple[str, ...]:
    return typing.get_args(typing.get_type_hints(struct)[key])


def test_every_scale_rewards_value_scales_differently():
    rewards = mx.array([0.0, 1.0, 1.0, 1.0, 0.0, 3.0, 0.0, 0.0])
    results = {s: tuple(grpo.group_advantages(rewards, 4, s).tolist()) for s in _literal(config.GrpoConfig, "scale_rewards")}
    assert len(set(results.values())) == len(results), results  # none falls through to another's branch


def test_every_importance_sampling_level_weighs_differently():
    logps = mx.array([[-1.0, -2.0, -0.5], [-0.5, -1.5, -2.5]])
    old = mx.array([[-1.2, -1.0, -0.4], [-0.6, -2.0, -2.0]])
    losses = {}
    for level in _literal(config.GrpoConfig, "importance_sampling_level"):
        settings = grpo.LossSettings("grpo", 0.2, 0.28, importance_sampling_level=level)
        losses[level] = grpo.policy_loss(logps, old, mx.array([1.0, -1.0]), mx.ones((2, 3)), settings)[0].item()
    assert len(set(losses.values())) == len(losses), losses


def test_no_extra_shares_a_name_with_a_likely_column_and_each_is_documented(root):
    from grpo_tui.common.reward_names import EXTRAS, LIKELY_COLUMNS, RENAMED

    assert not set(EXTRAS) & set(LIKELY_COLUMNS) and set(RENAMED) <= set(LIKELY_COLUMNS)
    documented = (root / "docs" / "config.md").read_text()
    assert all(f"`{name}" in documented for name in EXTRAS)
