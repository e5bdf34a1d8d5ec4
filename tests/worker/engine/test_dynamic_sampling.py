"""dynamic_sampling's pure parts: which groups are informative, which train, the extra rounds'
prompts, and the step's sampling metrics."""

from __future__ import annotations

from grpo_tui.worker.engine import dynamic_sampling as ds
from grpo_tui.worker.engine.scoring.reward_call import StepLog
from grpo_tui.worker.engine.policy.rollout import Completion

G = 2


def _round(rewards: list[list[float | None]], tag: str) -> ds.Round:
    completions = [Completion(prompt_index=p, token_ids=[1], text=f"{tag}{p}.{j}", finish_reason="stop")
                   for p, group in enumerate(rewards) for j in range(len(group))]
    totals = [r for group in rewards for r in group]
    log = StepLog(len(totals))
    log.metrics["m"] = [float(len(tag))]
    return ds.Round([f"ex-{tag}{p}" for p in range(len(rewards))], completions, totals, {"f": list(totals)}, log)  # type: ignore[arg-type]


def test_informative_groups_leave_unscored_completions_out():
    # as the advantages do (TRL 1.16): [None, 0.5] has one score, nothing to compare it with
    assert ds.informative_groups([1.0, 1.0, 0.0, 1.0, None, 0.0, None, 0.5], G) == [False, True, False, False]


def test_the_first_batch_size_informative_groups_train_in_rollout_order():
    rounds = [_round([[1, 1], [0, 1], [2, 2]], "a"), _round([[3, 4], [5, 6], [7, 7]], "b")]
    sel = ds.select(rounds, G, 3, dynamic=True)
    assert sel.slots == [1, 3, 4] and not sel.padding and sel.informative == 3
    assert sel.dropped == {0, 2, 5}
    examples, completions, totals, padding = sel.trained(G)
    assert examples == ["ex-a1", "ex-b0", "ex-b1"]
    assert [c.prompt_index for c in completions] == [0, 0, 1, 1, 2, 2] and totals == [0, 1, 3, 4, 5, 6]
    assert [c.text for c in completions] == ["a1.0", "a1.1", "b0.0", "b0.1", "b1.0", "b1.1"]
    assert not any(padding)
    assert sel.logged.metrics["m"] == [1.0, 1.0]
    assert ds.metrics(sel, G) == {"sampling/rounds": 2.0, "sampling/dropped_groups": 3.0,
                                  "sampling/generated_completions": 12.0}
    assert ds.shortfall(sel, 3) is None


def test_short_of_informative_groups_pads_with_masked_dropped_ones_and_says_so():
    sel = ds.select([_round([[1, 1], [0, 1], [2, 2]], "a")], G, 3, dynamic=True)
    assert sel.slots == [1, 0, 2] and sel.padding == {1, 2} and sel.dropped == {0, 2}
    assert sel.trained(G)[3] == [False, False, True, True, True, True]
    assert "found 1 of 3 informative groups in 1 rounds" in str(ds.shortfall(sel, 3))


def test_without_dynamic_sampling_every_group_trains():
    sel = ds.select([_round([[1, 1], [0, 1]], "a")], G, 2, dynamic=False)
    assert sel.slots == [0, 1] and sel.dropped == set()


def test_extra_prompts_are_fresh_and_a_function_of_step_and_round():
    picks = ds.extra_prompts(5, 1, 20, 4, 0, used={0, 1, 2})
    assert len(set(picks)) == 4 and not set(picks) & {0, 1, 2}
    assert picks == ds.extra_prompts(5, 1, 20, 4, 0, used={0, 1, 2})
    assert picks != ds.extra_prompts(5, 2, 20, 4, 0, used={0, 1, 2})
    assert len(ds.extra_prompts(1, 1, 3, 4, 0, used={0, 1})) == 4  # a tiny dataset repeats prompts


def test_the_sampling_metrics_reach_the_trackers_under_their_names():
    from grpo_tui.protocol.messages import Step
    from grpo_tui.common.trl_names import step_metrics

    logged = step_metrics(Step(step=3, epoch=0, extra_metrics={"sampling/rounds": 2.0, "sampling/dropped_groups": 5.0,
                                                               "sampling/generated_completions": 32.0}))
    assert logged["sampling/rounds"] == 2.0 and logged["sampling/dropped_groups"] == 5.0
    assert logged["sampling/generated_completions"] == 32.0
