"""``[curriculum]`` through the real worker: a resume draws the prompts the uninterrupted run draws,
and the store's prompt history is what its generations scored."""

from __future__ import annotations

import json

import pytest

from grpo_tui.protocol import messages as m
from tests.helpers.worker_harness import PROMPTS, WorkerProcess, query, reward_config, tiny_model, write_config

__all__ = ["tiny_model"]

CURRICULUM = {"strategy": "pass_rate", "revisit_probability": 0.25, "max_pass_rate": 0.6}
VISITS = "SELECT step, prompt_index, prompt_row, passed, pass_rate, state, visits FROM prompt_visits ORDER BY id"


def run_to_end(config, *args: str) -> WorkerProcess:
    worker = WorkerProcess(config, *args)
    worker.wait_for(m.Complete)
    assert worker.finish() == 0, worker.stderr.decode()[-2000:]
    return worker


@pytest.mark.slow
def test_a_resume_draws_the_prompts_of_the_uninterrupted_run(tmp_path, tiny_model):
    """8 prompts, 2 a step: steps 5-8 and 9-10 draw from the pass rates; the split run stops after
    step 5 (mid-epoch) and resumes from its checkpoint."""
    model = tiny_model
    settings = dict(training={"max_steps": 10, "num_epochs": 3}, checkpoint={"save_every": 0}, curriculum=CURRICULUM)
    straight, split = tmp_path / "straight", tmp_path / "split"
    for folder in (straight, split):
        folder.mkdir()
    run_to_end(write_config(straight, model, rewards=reward_config(straight, "varied"), **settings))
    rewards = reward_config(split, "varied")
    first = dict(settings, training={"max_steps": 5, "num_epochs": 3})
    run_to_end(write_config(split, model, rewards=rewards, **first))
    assert (split / "out" / "final" / "curriculum.json").exists()
    resumed = run_to_end(write_config(split, model, rewards=rewards, **settings))
    assert [e.step for e in resumed.of(m.Step)] == list(range(6, 11))

    one, two = (query(f / "out" / "outputs.db", VISITS) for f in (straight, split))
    assert one == two and {row[5] for row in one} > {"learning"}  # some prompts were set aside
    prompts = "SELECT step, prompt_index, prompt FROM generations WHERE group_index = 0 ORDER BY step, prompt_index"
    assert query(straight / "out" / "outputs.db", prompts) == query(split / "out" / "outputs.db", prompts)


@pytest.mark.parametrize("settings", [
    {},
    {"grpo": {"group_size": 2, "dynamic_sampling": True, "max_sampling_rounds": 3}},  # more rounds: more visits
    {"training": {"max_steps": 8, "num_epochs": 2, "steps_per_generation": 2}},  # a block drawn at once
], ids=["plain", "dynamic-sampling", "generation-reuse"])
def test_a_prompts_history_in_the_store_matches_its_generations(tmp_path, tiny_model, settings):
    sections = {"training": {"max_steps": 8, "num_epochs": 2}, "checkpoint": {"save_every": 0},
                "curriculum": CURRICULUM, **settings}
    config = write_config(tmp_path, tiny_model, rewards=reward_config(tmp_path, "varied"), **sections)
    worker = run_to_end(config)
    db = tmp_path / "out" / "outputs.db"
    visits = query(db, VISITS)
    groups = query(db, "SELECT DISTINCT step, prompt_index FROM generations ORDER BY step, prompt_index")
    assert sorted((v[0], v[1]) for v in visits) == groups  # every group of every step, every round, is a visit
    assert ("grpo" in settings) == any(index >= 2 for _, index in groups)  # dynamic sampling ran more rounds
    best, seen = float("-inf"), set()
    for step, index, row, passed, pass_rate, state, count in visits:
        round_ = index // 2  # batch_size 2: the round's groups are 2r and 2r + 1
        if (step, round_) not in seen:  # a round's best reward counts from that round on
            seen.add((step, round_))
            best = max(best, query(db, "SELECT max(reward) FROM generations WHERE step = ? AND prompt_index / 2 = ?",
                                   step, round_)[0][0])
        generations = query(db, "SELECT prompt, reward FROM generations WHERE step = ? AND prompt_index = ?", step, index)
        assert len(generations) == 2 and PROMPTS[row] in generations[0][0]  # the row's own prompt
        assert passed == sum(r >= best - 1e-9 for _, r in generations) / 2  # a pass: the best reward seen so far
        assert state == ("too_hard" if pass_rate < 0.1 else "solved" if pass_rate > 0.6 else "learning")
    # the prompts view: each prompt's visits, last step and latest pass rate
    for row, n, last_step, pass_rate in query(db, "SELECT prompt_row, visits, last_step, pass_rate FROM prompts"):
        mine = [v for v in visits if v[2] == row]
        assert (n, last_step, pass_rate) == (len(mine), mine[-1][0], mine[-1][4])
    # the step frames carry the pool's states (the Charts tab's strip)
    pools = [e.extra_metrics for e in worker.of(m.Step)]
    assert all(sum(p[f"curriculum/{s}"] for s in ("unseen", "too_hard", "learning", "solved")) == 8 for p in pools)
    assert json.loads(query(db, "SELECT extra_metrics FROM steps WHERE step = 8")[0][0])["curriculum/unseen"] == 0


def test_the_curriculum_turns_on_live_and_its_band_changes_live(tmp_path, tiny_model):
    config = write_config(tmp_path, tiny_model, rewards=reward_config(tmp_path, "varied"),
                          training={"max_steps": 6, "num_epochs": 2, "silent_patience": 0}, checkpoint={"save_every": 0})
    worker = WorkerProcess(config)
    worker.wait_for(m.Step, lambda e: e.step == 1)
    worker.send(m.Pause())
    worker.wait_for(m.Paused)
    worker.send(m.SetSetting(key="curriculum.strategy", value='"levels"'))
    assert "needs each row's difficulty" in worker.wait_for(m.SettingRefused).message  # no level column here
    worker.send(m.SetSetting(key="curriculum.strategy", value="pass_rate"))
    worker.send(m.SetSetting(key="curriculum.max_pass_rate", value="0.5"))
    changed = [worker.wait_for(m.SettingChanged) for _ in range(2)]
    assert [(c.key, c.new) for c in changed] == [("curriculum.strategy", "pass_rate"), ("curriculum.max_pass_rate", 0.5)]
    worker.send(m.Resume())
    worker.wait_for(m.Complete)
    assert worker.finish() == 0
    steps = {e.step: e.extra_metrics for e in worker.of(m.Step)}
    start = changed[0].step
    assert all("curriculum/learning" not in steps[s] for s in range(1, start))
    assert all("curriculum/learning" in steps[s] for s in range(start, 7))
    db = tmp_path / "out" / "outputs.db"
    assert query(db, "SELECT min(step) FROM prompt_visits") == [(start,)]
    assert {s for s, in query(db, "SELECT DISTINCT state FROM prompt_visits WHERE pass_rate > 0.5")} <= {"solved"}
