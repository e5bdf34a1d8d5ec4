"""The pass-rate curriculum's draws (worker/engine/prompts/curriculum.py), with scores from a fixed table of
each prompt's chance to pass: the same seed draws the same prompts, a restored state draws what the
uninterrupted run draws, set-aside prompts come back at the stated rate, the band follows a live
change, and ``levels`` rises once its level is mostly solved."""

from __future__ import annotations

import numpy as np

from grpo_tui.protocol.config_curriculum import CurriculumConfig
from grpo_tui.worker.engine.prompts.curriculum import LEARNING, SOLVED, TOO_HARD, UNSEEN, Curriculum

G, B = 4, 8


def make(size: int = 64, seed: int = 0, levels: np.ndarray | None = None) -> Curriculum:
    return Curriculum(size=size, seed=seed, batch_size=B, steps_per_epoch=-(-size // B), group_size=G, levels=levels)


def scores(step: int, rows: list[int], chance: np.ndarray) -> list[float | None]:
    """Each row's G completions: 1.0 with the row's chance, else 0.0 (seeded by the step)."""
    rng = np.random.default_rng([step, 99])
    return [float(rng.random() < chance[r]) for r in rows for _ in range(G)]


def run(cur: Curriculum, config: CurriculumConfig, steps: range, chance: np.ndarray,
        metrics: list[dict[str, float]] | None = None) -> dict[int, list[int]]:
    drawn = {}
    for step in steps:
        _, _, rows = cur.batch(step, config)
        drawn[step] = rows
        cur.observe(step, 0, rows, scores(step, rows, chance))
        said = cur.commit(step, config)[1]
        if metrics is not None:
            metrics.append(said)
    return drawn


# a third of the prompts hopeless, a third solved, a third being learned
CHANCE = np.array([0.0, 1.0, 0.5] * 22)[:64]
CONFIG = CurriculumConfig(strategy="pass_rate", revisit_probability=0.1, max_pass_rate=0.9, decay=0.5)


def test_same_seed_same_prompts_and_another_seed_others():
    a = run(make(seed=3), CONFIG, range(1, 41), CHANCE)
    b = run(make(seed=3), CONFIG, range(1, 41), CHANCE)
    c = run(make(seed=4), CONFIG, range(1, 41), CHANCE)
    assert a == b and a != c
    assert all(len(rows) == B and len(set(rows)) == B for rows in a.values())


def test_restored_state_draws_what_the_uninterrupted_run_draws():
    whole = run(make(), CONFIG, range(1, 31), CHANCE)
    first = make()
    run(first, CONFIG, range(1, 13), CHANCE)
    resumed = make()
    resumed.restore(first.to_bytes())
    assert [resumed.batch(s, CONFIG)[2] for s in range(9, 13)] == [whole[s] for s in range(9, 13)]  # the epoch so far
    assert run(resumed, CONFIG, range(13, 31), CHANCE) == {s: whole[s] for s in range(13, 31)}


def test_first_epoch_visits_every_prompt_then_set_aside_ones_only_come_back_as_revisits():
    cur = make()
    never = CurriculumConfig(strategy="pass_rate", revisit_probability=0.0, max_pass_rate=0.9, decay=0.5)
    drawn = run(cur, never, range(1, 9), CHANCE)  # one epoch: unseen prompts come first
    assert sorted(r for rows in drawn.values() for r in rows) == list(range(64))
    states = cur.states(CONFIG)
    assert set(states[CHANCE == 0.0]) == {TOO_HARD} and set(states[CHANCE == 1.0]) == {SOLVED}
    said: list[dict[str, float]] = []
    later = run(cur, CONFIG, range(9, 209), CHANCE, said)
    picks = [r for rows in later.values() for r in rows]
    aside = sum(CHANCE[r] in (0.0, 1.0) for r in picks)
    revisits = sum(m["curriculum/revisits"] for m in said)
    # revisits take their stated share of the slots (1,600 slots: the binomial's standard deviation
    # is 0.75 percentage points), and a hopeless or solved prompt comes back only as one
    assert abs(revisits / len(picks) - CONFIG.revisit_probability) < 0.025
    assert 0.6 * revisits < aside <= revisits


def test_revisits_at_a_live_changed_rate_and_the_band_moves_at_once():
    cur = make()
    run(cur, CONFIG, range(1, 9), CHANCE)
    often = CurriculumConfig(strategy="pass_rate", revisit_probability=0.5, max_pass_rate=0.9, decay=0.5)
    picks = [r for rows in run(cur, often, range(9, 109), CHANCE).values() for r in rows]
    assert abs(sum(CHANCE[r] in (0.0, 1.0) for r in picks) / len(picks) - 0.5) < 0.05
    wide = CurriculumConfig(strategy="pass_rate", min_pass_rate=0.0, max_pass_rate=1.0)
    assert set(cur.states(wide)) == {LEARNING}  # a live change of the band: no prompt is set aside


def test_pass_rate_is_a_decayed_average_and_the_pass_is_the_best_reward_seen():
    cur = make(size=8)
    config = CurriculumConfig(strategy="pass_rate", decay=0.5)
    cur.batch(1, config)
    cur.observe(1, 0, [0], [1.2, 0.2, 0.2, 0.2])  # passing = reaching 1.2, the best so far
    visits, metrics = cur.commit(1, config)
    assert (visits[0].prompt_row, visits[0].passed, visits[0].pass_rate, visits[0].state, visits[0].visits) == (0, 0.25, 0.25, LEARNING, 1)
    cur.batch(2, config)
    cur.observe(2, 1, [0], [1.2, 1.2, 1.2, None])  # an unscored completion is left out; round 1's place
    visits, metrics = cur.commit(2, config)
    assert visits[0].pass_rate == 0.5 * 0.25 + 0.5 * 1.0 and visits[0].prompt_index == B
    assert metrics["curriculum/unseen"] == 7 and metrics["curriculum/learning"] == 1
    assert metrics["curriculum/uniform_flat_share"] == (0.625**G + 0.375**G)
    assert cur.states(config)[1] == UNSEEN


def test_levels_rise_once_the_level_is_mostly_solved():
    levels = np.repeat([0, 1, 2], 16)
    cur = make(size=48, levels=levels)
    config = CurriculumConfig(strategy="levels", raise_level_at=0.8, revisit_probability=0.0)
    easy = np.where(levels == 0, 1.0, 0.0)  # level 0 always solved, the rest hopeless
    first = run(cur, config, range(1, 2), easy)[1]
    assert all(levels[r] == 0 for r in first) and cur.level == 1  # half of level 0 seen, all solved
    drawn = run(cur, config, range(2, 5), easy)
    # level 1's prompts and level 0's unseen ones; level 0's solved ones are set aside, level 2 is closed
    assert sorted(r for rows in drawn.values() for r in rows) == sorted(set(range(32)) - set(first))
    run(cur, config, range(4, 12), easy)
    assert cur.level == 1  # level 1 is hopeless: it stays


def test_a_reasoning_gym_source_under_levels_is_built_at_each_level_of_its_curriculum():
    from grpo_tui.protocol.config_environments import ReasoningGymConfig
    from grpo_tui.worker.engine.prompts import reasoning_gym_source

    config = ReasoningGymConfig(tasks=["leg_counting"], size=20, seed=1)
    rows, digest = reasoning_gym_source.build(config, levels=3)
    assert [r["level"] for r in rows] == [0] * 20 + [1] * 20 + [2] * 20
    animals = [max(len(r["metadata"]["animals"]) for r in rows if r["level"] == level) for level in range(3)]
    assert animals == sorted(animals) and animals[0] < animals[2]  # reasoning-gym's levels: more animals
    assert digest != reasoning_gym_source.build(config)[1] and "level" not in reasoning_gym_source.build(config)[0][0]


def test_levels_without_a_level_in_the_data_is_a_mistake_that_names_the_fix():
    import pytest

    from grpo_tui.protocol.config import validate
    from grpo_tui.protocol.outcome import Mistake
    from grpo_tui.worker.engine.prompts import curriculum, data

    config = validate({"model": {"path": "m"}, "data": {"path": "d"}, "rewards": [{"name": "accuracy"}],
                       "curriculum": {"strategy": "levels"}})
    rows = data.examples_of([{"prompt": "1+1", "answer": "2"}], config.data, "data.jsonl")
    with pytest.raises(Mistake, match='needs each row\'s difficulty: a reasoning-gym source'):
        curriculum.for_run(config, rows, 1)


def test_dynamic_samplings_extra_rounds_draw_learning_prompts_not_used_this_step():
    cur = make()
    never = CurriculumConfig(strategy="pass_rate", revisit_probability=0.0)
    run(cur, never, range(1, 9), CHANCE)
    _, _, rows = cur.batch(9, never)
    extra = cur.extra(9, 1, set(rows), never)
    learning = set(np.flatnonzero(cur.states(never) == LEARNING))
    assert len(extra) == B and not set(extra) & set(rows) and set(extra) <= learning
    again = make()
    run(again, never, range(1, 9), CHANCE)
    again.batch(9, never)
    assert again.extra(9, 1, set(rows), never) == extra  # a function of the state and (seed, step, round)


def test_the_step_by_step_engine_refuses_a_curriculum(tmp_path):
    import pytest

    from grpo_tui.protocol.config import load_config
    from grpo_tui.worker.engine.stepwise import Engine, EngineError
    from tests.helpers.tiny_model import write_config

    config = load_config(write_config(tmp_path, tmp_path, '[curriculum]\nstrategy = "pass_rate"\n'), check_paths=False)
    with pytest.raises(EngineError, match="curriculum.strategy = 'pass_rate': the engine's batches are the data order"):
        Engine(config)
