"""``grpo.multi_objective_aggregation`` (TRL 1.16): both branches' advantages against a
transcription of TRL's code on random cases (None scores among them: a completion every function
scored None is left out of its group's baseline), and the trained batch's scores, not every
generated completion's, with dynamic sampling."""

from __future__ import annotations

import numpy as np
import pytest

from grpo_tui.protocol.config import validate
from grpo_tui.worker.engine import dynamic_sampling as ds
from grpo_tui.worker.engine.learning.grpo import group_advantages, normalize_then_sum
from grpo_tui.worker.engine.scoring.reward_call import StepLog
from grpo_tui.worker.engine.policy.rollout import Completion
from grpo_tui.worker.engine.learning.grpo import advantages as _advantages
from tests.helpers.trl_advantages import trl_normalize_then_sum, trl_sum_then_normalize


@pytest.mark.parametrize("seed", range(40))
def test_normalize_then_sum_is_trls(seed):
    rng = np.random.default_rng(seed)
    groups, group_size, k = int(rng.integers(1, 5)), int(rng.integers(2, 6)), int(rng.integers(1, 4))
    n = groups * group_size
    scores = rng.normal(size=(n, k)) if seed % 2 else rng.integers(0, 3, size=(n, k)).astype(np.float64)
    scores[rng.random((n, k)) < [0.0, 0.2, 0.5][seed % 3]] = np.nan  # None scores
    if seed % 5 == 0:
        scores[: group_size] = np.nan  # a whole group unscorable
    weights = rng.uniform(-1.0, 2.0, size=k)
    ours = np.array(normalize_then_sum(scores, weights, group_size))
    np.testing.assert_allclose(ours, trl_normalize_then_sum(scores, weights, group_size), atol=2e-5, rtol=1e-5)
    assert np.all(ours[np.isnan(scores).all(axis=1)] == 0.0)


def _weighted_totals(scores: np.ndarray, weights: np.ndarray) -> list[float | None]:
    """The worker's totals: the weighted sum of the scores that are not None, None when none is."""
    return [None if np.isnan(row).all() else float(np.nansum(row * weights)) for row in scores]


@pytest.mark.parametrize("scale", ["group", "batch", "none"])
@pytest.mark.parametrize("seed", range(12))
def test_sum_then_normalize_is_trls_with_unscored_completions(seed, scale):
    rng = np.random.default_rng(100 + seed)
    groups, group_size, k = int(rng.integers(1, 5)), int(rng.integers(2, 6)), int(rng.integers(1, 3))
    n = groups * group_size
    scores = rng.normal(size=(n, k)) if seed % 2 else rng.integers(0, 3, size=(n, k)).astype(np.float64)
    scores[rng.random((n, k)) < [0.2, 0.5, 0.7][seed % 3]] = np.nan
    if seed % 4 == 0:
        scores[:group_size] = np.nan  # a whole group unscorable
    weights = rng.uniform(0.5, 2.0, size=k)
    ours = np.array(group_advantages(_weighted_totals(scores, weights), group_size, scale))
    np.testing.assert_allclose(ours, trl_sum_then_normalize(scores, weights, group_size, scale), atol=2e-5, rtol=1e-5)
    assert np.all(ours[np.isnan(scores).all(axis=1)] == 0.0)


def test_an_unscored_completion_is_not_a_zero_in_its_groups_baseline():
    # TRL 1.16: [1, 1, None, 0] has baseline 2/3 over its three scores; counting None as 0 gave 1/2
    adv = np.array(group_advantages([1.0, 1.0, None, 0.0], 4, "none"))
    np.testing.assert_allclose(adv, [1 / 3, 1 / 3, 0.0, -2 / 3], atol=1e-6)
    # a group whose only scored completion stands alone has nothing to compare it with
    assert np.array(group_advantages([None, 1.0, None, None], 4, "group")).tolist() == [0.0] * 4
    assert ds.informative_groups([None, 1.0, None, None, 0.0, None, 1.0, None], 4) == [False, True]


def test_it_is_not_the_normalised_weighted_sum():
    # the weighted sum ranks row 3 (total 50) above row 1 (total 1); normalising each reward first lets the small one count
    scores = np.array([[100.0, 0.0], [0.0, 1.0], [50.0, 1.0], [50.0, 0.0]])
    adv = np.array(normalize_then_sum(scores, np.ones(2), 4))
    assert adv[1] > adv[3]
    np.testing.assert_allclose(adv, trl_normalize_then_sum(scores, np.ones(2), 4), atol=1e-5)


def _round(scores: list[list[tuple[float, float | None]]], tag: str) -> ds.Round:
    completions = [Completion(prompt_index=p, token_ids=[1], text=f"{tag}{p}.{j}", finish_reason="stop")
                   for p, group in enumerate(scores) for j in range(len(group))]
    f = [a for group in scores for a, _ in group]
    h = [b for group in scores for _, b in group]
    totals = [a + 0.5 * (b or 0.0) for a, b in zip(f, h)]
    return ds.Round([f"ex-{tag}{p}" for p in range(len(scores))], completions, totals,  # type: ignore[arg-type]
                    {"f": list(f), "h": list(h)}, StepLog(len(totals)))


def _config(aggregation: str):
    return validate({"model": {"path": "m"}, "data": {"path": "d"}, "rewards": [{"name": "length"}],
                     "grpo": {"group_size": 2, "multi_objective_aggregation": aggregation}})


def test_with_dynamic_sampling_the_trained_groups_scores_make_the_advantages():
    # round a: group 0 is flat (dropped), group 1 informative; round b: group 0 informative, group 1 flat
    rounds = [_round([[(1, 0), (1, 0)], [(0, 1), (1, None)]], "a"), _round([[(3, 2), (5, 0)], [(7, 1), (7, 1)]], "b")]
    sel = ds.select(rounds, 2, 2, dynamic=True)
    assert sel.slots == [1, 2] and len(sel.per_fn["f"]) == 8
    scores = sel.trained_scores(2)
    assert scores == {"f": [0, 1, 3, 5], "h": [1, None, 2, 0]}
    _, _, totals, _ = sel.trained(2)
    adv = np.array(_advantages(_config("normalize_then_sum"), totals, sel.trained_scores(2), {"f": 1.0, "h": 0.5}))
    expected = trl_normalize_then_sum(np.array([[0, 1], [1, np.nan], [3, 2], [5, 0]], dtype=np.float64), np.array([1.0, 0.5]), 2)
    np.testing.assert_allclose(adv, expected, atol=1e-5)
    # the default still normalises the weighted totals per group
    np.testing.assert_allclose(np.array(_advantages(_config("sum_then_normalize"), totals, sel.trained_scores(2), {"f": 1.0, "h": 0.5})),
                               [-0.7071, 0.7071, -0.7071, 0.7071], atol=1e-3)
