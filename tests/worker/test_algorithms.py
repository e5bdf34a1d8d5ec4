"""Issue 35's keys through the real worker process on the tiny model: top_entropy_quantile, the
soft overlong punishment, recipes, dynamic sampling, the reference model's sync, a judge model."""

from __future__ import annotations

import pytest

from grpo_tui.protocol import messages as m
from tests.helpers.worker_harness import WorkerProcess, query, reward_config, tiny_model, write_config

__all__ = ["tiny_model"]


def run_to_end(config, *args: str, **env: str) -> WorkerProcess:
    worker = WorkerProcess(config, *args, env=env)
    worker.wait_for(m.Complete)
    assert worker.finish() == 0, worker.stderr.decode()[-3000:]
    return worker


def test_top_entropy_quantile_changes_the_loss_of_the_same_rollout(tmp_path, tiny_model):
    losses = {}
    for quantile in (1.0, 0.2):
        folder = tmp_path / str(quantile)
        folder.mkdir()
        config = write_config(folder, tiny_model, rewards=reward_config(folder, "varied"),
                              grpo={"group_size": 4, "top_entropy_quantile": quantile}, training={"max_steps": 1})
        worker = run_to_end(config)
        (step,) = worker.of(m.Step)
        losses[quantile] = step.loss
        assert step.gradients_applied
        assert query(folder / "out" / "outputs.db", "SELECT count(*) FROM steps") == [(1,)]
    assert losses[0.2] != pytest.approx(losses[1.0], rel=1e-3)


def test_soft_overlong_scores_the_stored_completions_by_trls_formula(tmp_path, tiny_model):
    rewards = '[[rewards]]\nname = "soft_overlong"\nparams = { max_completion_length = 6, soft_punish_cache = 3 }\n'
    config = write_config(tmp_path, tiny_model, rewards=rewards, training={"max_steps": 2})
    run_to_end(config)
    rows = query(tmp_path / "out" / "outputs.db",
                 "SELECT num_tokens, json_extract(reward_details, '$.soft_overlong'), reward FROM generations")
    assert len(rows) == 2 * 2 * 2
    for n, score, total in rows:
        expected = 0.0 if n <= 3 else (3 - n) / 3 if n <= 6 else -1.0
        assert score == pytest.approx(expected) and total == pytest.approx(expected)
    assert {n for n, _, _ in rows} & {7, 8}  # the tiny model runs past the punishment's limit


def test_the_dr_grpo_recipe_trains_with_unscaled_advantages(tmp_path, tiny_model):
    config = write_config(tmp_path, tiny_model, rewards=reward_config(tmp_path, "varied"),
                          grpo={"group_size": 4, "recipe": "dr_grpo"}, training={"max_steps": 2})
    run_to_end(config)
    db = tmp_path / "out" / "outputs.db"
    (resolved,) = query(db, "SELECT json_extract(config, '$.grpo') FROM runs")
    assert '"loss_type":"dr_grpo"' in resolved[0] and '"scale_rewards":"none"' in resolved[0]
    rows = query(db, "SELECT step, prompt_index, reward, advantage FROM generations ORDER BY id")
    groups: dict = {}
    for step, prompt, reward, advantage in rows:
        groups.setdefault((step, prompt), []).append((reward, advantage))
    assert len(groups) == 4
    for members in groups.values():
        mean = sum(r for r, _ in members) / len(members)
        assert [a for _, a in members] == pytest.approx([r - mean for r, _ in members], abs=1e-6)  # no std division
    assert any(abs(a) > 1e-3 for _, _, _, a in rows)
