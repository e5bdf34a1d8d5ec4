"""The ``soft_overlong`` built-in equals TRL's ``get_soft_overlong_punishment`` (DAPO's Eq. 13) at
lengths on both sides of each boundary, and its params are checked when the config is read."""

from __future__ import annotations

import pytest

from grpo_tui.protocol.config import ConfigError, parse_config
from grpo_tui.worker.engine.scoring.rewards import load_rewards, score


class TrlSoftOverlongPunishment:
    """trl/rewards/other_rewards.py's _SoftOverlongPunishment, verbatim."""

    def __init__(self, max_completion_len: int, soft_punish_cache: int):
        self.max_completion_len = max_completion_len
        self.soft_punish_cache = soft_punish_cache

    def __call__(self, completion_ids: list[list[int]], **kwargs) -> list[float]:
        rewards = []
        for ids in completion_ids:
            completion_length = len(ids)
            if completion_length <= self.max_completion_len - self.soft_punish_cache:
                rewards.append(0.0)
            elif self.max_completion_len - self.soft_punish_cache < completion_length <= self.max_completion_len:
                rewards.append(
                    (self.max_completion_len - self.soft_punish_cache - completion_length) / self.soft_punish_cache
                )
            else:
                rewards.append(-1.0)
        return rewards


BASE = '[model]\npath="m"\n[data]\npath="d.jsonl"\n[generation]\nmax_completion_length = 64\n'


def _rewards(params: str):
    config = parse_config(BASE + f'[[rewards]]\nname = "soft_overlong"\nparams = {{ {params} }}\n', check_paths=False)
    return config, load_rewards(config.rewards)


def _score(rewards, config, lengths):
    ids = [[7] * n for n in lengths]
    extras = {"num_tokens": lengths, "max_completion_length": config.generation.max_completion_length}
    totals, per_fn = score(rewards, ["p"] * len(ids), ["x"] * len(ids), {}, extras, lambda m: None,
                           completion_ids=ids)
    return per_fn["soft_overlong"]


@pytest.mark.parametrize("limit, cache", [(100, 20), (20480, 4096), (10, 1), (10, 10), (10, 0)])
def test_it_is_trls_formula_on_both_sides_of_each_boundary(limit, cache):
    config, rewards = _rewards(f"max_completion_length = {limit}, soft_punish_cache = {cache}")
    start = limit - cache
    lengths = sorted({max(n, 0) for n in (0, 1, start - 1, start, start + 1, limit - 1, limit, limit + 1, limit + 50)})
    got = _score(rewards, config, lengths)
    assert got == pytest.approx(TrlSoftOverlongPunishment(limit, cache)([[7] * n for n in lengths]))
    by_length = dict(zip(lengths, got))
    assert by_length[start] == 0.0 and by_length[limit + 1] == -1.0
    if cache > 1:
        assert -1.0 < by_length[start + 1] < 0.0 and by_length[limit] == -1.0 + 0.0  # (L-C-L)/C = -1


def test_the_limit_defaults_to_the_runs_max_completion_length():
    config, rewards = _rewards("soft_punish_cache = 16")
    lengths = [48, 49, 56, 64, 65]
    assert _score(rewards, config, lengths) == pytest.approx(TrlSoftOverlongPunishment(64, 16)([[1] * n for n in lengths]))


@pytest.mark.parametrize("params, message", [
    ("max_completion_length = 100", "soft_overlong needs params.soft_punish_cache"),
    ("soft_punish_cache = -1", "soft_punish_cache must be a whole number"),
    ("soft_punish_cache = 2.5", "soft_punish_cache must be a whole number"),
    ("soft_punish_cache = 20, max_completion_length = 10", "must not exceed max_completion_length"),
    ("soft_punish_cache = 2, max_completion_length = 0", "max_completion_length must be a whole number"),
    ("soft_punish_cache = 2, cache = 3", "'cache' is not a soft_overlong parameter"),
])
def test_bad_params_are_config_errors_naming_the_key(params, message):
    with pytest.raises(ConfigError, match="rewards\\[0\\].params") as error:
        _rewards(params)
    assert message in str(error.value)
