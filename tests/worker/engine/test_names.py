"""Each list of names in the config contract is the list the engine implements, both ways."""

import typing

import mlx.core as mx
import pytest

from grpo_tui.protocol import config
from grpo_tui.worker.engine import grpo, rewards


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
