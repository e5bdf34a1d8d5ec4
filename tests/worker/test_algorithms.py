"""Issue 35's keys through the real worker process on the tiny model: top_entropy_quantile, the
soft overlong punishment, recipes, dynamic sampling, the reference model's sync, a judge model."""

from __future__ import annotations

import json

import numpy as np
import pytest

from grpo_tui.protocol import messages as m
from tests.helpers.trl_advantages import trl_normalize_then_sum
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


# ---------------------------------------------------------------- dynamic sampling

SPLIT_REWARD = '''
def split(prompts, completions, **kwargs):
    """All-equal rewards on prompts whose first number is odd; varied on the others."""
    out = []
    for p, c in zip(prompts, completions):
        first = int(p.split("What is ")[1].split(" ")[0])
        out.append(0.5 if first % 2 else len(c) + len(set(c)) / 10)
    return out

def flat(prompts, completions, **kwargs):
    return [1.0 for _ in completions]

def other(prompts, completions, **kwargs):
    """Flat where split is; on the others a second objective on another scale, None now and then."""
    out = []
    for p, c in zip(prompts, completions):
        first = int(p.split("What is ")[1].split(" ")[0])
        out.append(2.0 if first % 2 else None if len(c) % 3 == 0 else float(len(set(c)) % 4))
    return out
'''


def split_rewards(folder, name: str = "split") -> str:
    (folder / "split.py").write_text(SPLIT_REWARD)
    return f'[[rewards]]\nfunction = "{folder / "split.py"}:{name}"\n'


def _groups(db) -> dict:
    rows = query(db, "SELECT step, prompt_index, reward, dropped, prompt FROM generations ORDER BY id")
    groups: dict = {}
    for step, prompt_index, reward, dropped, prompt in rows:
        groups.setdefault((step, prompt_index), []).append((reward, dropped, prompt))
    return groups


def check_dynamic_run(worker: WorkerProcess, db, batch_size: int, group_size: int) -> None:
    """Every step's sampling/* metrics agree with its stored generations: a group is marked dropped
    exactly when its rewards are all equal, and the trained groups fill the batch unless the step
    said it ran out of rounds."""
    groups = _groups(db)
    warnings = [e.message for e in worker.of(m.Log) if "dynamic sampling found" in e.message]
    for step in worker.of(m.Step):
        extra = step.extra_metrics
        mine = {k: v for k, v in groups.items() if k[0] == step.step}
        assert extra["sampling/generated_completions"] == len(mine) * group_size
        assert extra["sampling/rounds"] == len(mine) // batch_size
        dropped = [k for k, members in mine.items() if members[0][1]]
        assert extra["sampling/dropped_groups"] == len(dropped)
        informative = {k for k, members in mine.items() if len({r for r, _, _ in members}) > 1}
        assert all(len({d for _, d, _ in members}) == 1 for members in mine.values())
        trained = set(mine) - set(dropped)
        said = any(w.startswith(f"step {step.step}: ") for w in warnings)
        assert trained <= informative  # only informative groups are trained on
        # the first batch_size informative groups in rollout order, or all of them and the step says so
        assert sorted(trained) == sorted(informative)[:batch_size]
        assert len(trained) == batch_size or said
        stored = query(db, "SELECT extra_metrics FROM steps WHERE step = ?", step.step)[0][0]
        assert '"sampling/rounds"' in stored


def check_normalize_then_sum(db, batch_size: int, group_size: int, weights: list[float]) -> None:
    """Each step's stored advantages are TRL's normalize_then_sum of its trained groups' stored
    per-function scores (the trained slots: the informative groups, then flat stand-ins)."""
    rows = query(db, "SELECT step, prompt_index, reward, reward_details, advantage, dropped FROM generations ORDER BY id")
    steps: dict = {}
    for step, prompt_index, reward, details, advantage, dropped in rows:
        steps.setdefault(step, {}).setdefault(prompt_index, []).append((reward, json.loads(details), advantage, dropped))
    for groups in steps.values():
        order = sorted(groups)
        useful = [g for g in order if len({r or 0.0 for r, _, _, _ in groups[g]}) > 1]
        slots = useful[:batch_size]
        slots += [g for g in order if g not in useful][: batch_size - len(slots)]
        labels = list(groups[order[0]][0][1])
        scores = np.array([[np.nan if d[label] is None else d[label] for label in labels]
                           for g in slots for _, d, _, _ in groups[g]], dtype=np.float64)
        expected = trl_normalize_then_sum(scores, np.array(weights), group_size).reshape(-1, group_size)
        for k, g in enumerate(slots):
            if not groups[g][0][3]:  # a trained group (a stand-in's is stored as 0)
                assert [a for _, _, a, _ in groups[g]] == pytest.approx(list(expected[k]), abs=1e-4)


def test_dynamic_sampling_drops_equal_groups_and_rolls_out_more(tmp_path, tiny_model):
    # with two objectives and TRL 1.16's normalize_then_sum: the trained groups' scores give the advantages
    rewards = split_rewards(tmp_path) + f'[[rewards]]\nfunction = "{tmp_path / "split.py"}:other"\nweight = 0.5\n'
    config = write_config(tmp_path, tiny_model, rewards=rewards,
                          grpo={"group_size": 4, "dynamic_sampling": True, "max_sampling_rounds": 4,
                                "multi_objective_aggregation": "normalize_then_sum"},
                          training={"max_steps": 3, "batch_size": 2})
    worker = run_to_end(config)
    db = tmp_path / "out" / "outputs.db"
    check_dynamic_run(worker, db, 2, 4)
    check_normalize_then_sum(db, 2, 4, [1.0, 0.5])
    steps = worker.of(m.Step)
    assert any(s.extra_metrics["sampling/rounds"] > 1 for s in steps)  # 5 of the 8 prompts are flat
    assert any(s.extra_metrics["sampling/dropped_groups"] > 0 for s in steps)
    # the Database tab's filter reads the marks
    from grpo_tui.tui.db import GenFilter
    from grpo_tui.tui.db.queries import count_generations
    from grpo_tui.tui.db.store import open_readonly

    conn = open_readonly(db)
    total = query(db, "SELECT count(*), sum(dropped) FROM generations")[0]
    assert count_generations(conn, GenFilter(dropped=True)) == total[1] > 0
    assert count_generations(conn, GenFilter(dropped=False)) == total[0] - total[1]


def test_dynamic_sampling_that_runs_out_of_rounds_trains_on_what_it_has_and_says_so(tmp_path, tiny_model):
    config = write_config(tmp_path, tiny_model, rewards=split_rewards(tmp_path, "flat"),
                          grpo={"group_size": 2, "dynamic_sampling": True, "max_sampling_rounds": 2},
                          training={"max_steps": 2, "batch_size": 2})
    worker = run_to_end(config)
    for step in worker.of(m.Step):
        sampling = {k: v for k, v in step.extra_metrics.items() if k.startswith("sampling/")}
        assert sampling == {"sampling/rounds": 2.0, "sampling/dropped_groups": 4.0, "sampling/generated_completions": 8.0}
        assert step.gradients_applied and step.loss == 0.0
    said = [e for e in worker.of(m.Log) if "dynamic sampling found" in e.message]
    assert [e.level for e in said] == ["warning", "warning"]
    assert said[0].message == ("step 1: dynamic sampling found 0 of 2 informative groups in 2 rounds "
                               "(max_sampling_rounds); training on those 0, the other 2 slots masked out")


def test_a_resumed_dynamic_run_samples_the_same_rounds(tmp_path, tiny_model):
    """The extra rounds' prompts and keys are functions of the step: a run killed after step 2 and
    resumed rolls out, drops and trains on what the straight run did."""
    runs = {}
    for name in ("straight", "split"):
        folder = tmp_path / name
        folder.mkdir()
        config = write_config(folder, tiny_model, rewards=split_rewards(folder),
                              grpo={"group_size": 4, "dynamic_sampling": True},
                              training={"max_steps": 4, "batch_size": 2}, checkpoint={"save_every": 2})
        if name == "split":
            first = WorkerProcess(config)
            first.wait_for(m.Checkpoint, lambda c: c.step == 2)
            first.kill()
        worker = run_to_end(config)
        runs[name] = {s.step: (s.loss, s.extra_metrics) for s in worker.of(m.Step)}
        runs[name + "-rows"] = query(folder / "out" / "outputs.db", "SELECT step, prompt_index, raw_completion, dropped "
                                     "FROM generations WHERE step > 2 ORDER BY step, prompt_index, group_index")
    for step in (3, 4):
        assert runs["split"][step][1] == runs["straight"][step][1]
        assert runs["split"][step][0] == pytest.approx(runs["straight"][step][0], rel=1e-5, abs=1e-8)
    assert runs["split-rows"] == runs["straight-rows"]


def test_dynamic_sampling_with_agent_rollouts(tmp_path):
    """The agent demo (tiny-agent calls the calculator in about a third of its answers): rounds of
    agent rollouts, dropped groups stored with their conversations."""
    from grpo_tui.protocol.config import load_config
    from grpo_tui.common.tomlout import dumps
    from tests.helpers.worker_harness import ROOT

    config = load_config(ROOT / "examples" / "agent_calculator.toml")
    config.grpo.group_size, config.training.batch_size, config.training.max_steps = 4, 4, 2
    config.grpo.dynamic_sampling, config.grpo.max_sampling_rounds = True, 3
    config.generation.max_completion_length = 64
    config.checkpoint.output_dir = str(tmp_path / "out")
    path = tmp_path / "agent.toml"
    path.write_text(dumps(config.to_dict()))
    worker = run_to_end(path)
    db = tmp_path / "out" / "outputs.db"
    check_dynamic_run(worker, db, 4, 4)
    steps = worker.of(m.Step)
    assert any(s.extra_metrics["sampling/dropped_groups"] > 0 for s in steps)
    assert all("tools/call_frequency" in s.extra_metrics for s in steps)
    with_turns = query(db, "SELECT count(*) FROM generations WHERE dropped = 1 AND turns IS NOT NULL")[0][0]
    assert with_turns > 0  # dropped agent completions keep their conversation


# ---------------------------------------------------------------- reference model sync

def _weights(path) -> dict:
    import mlx.core as mx
    import numpy as np

    return {k: np.array(v.astype(mx.float32)) for k, v in mx.load(str(path)).items()}


def test_the_reference_after_a_sync_is_alpha_policy_plus_the_rest_of_the_old_one(tmp_path, tiny_model):
    import numpy as np

    config = write_config(tmp_path, tiny_model, rewards=reward_config(tmp_path, "varied"),
                          grpo={"group_size": 4, "beta": 0.05, "sync_ref_model": True, "ref_model_mixup_alpha": 0.6,
                                "ref_model_sync_steps": 2},
                          training={"max_steps": 3, "learning_rate": 5e-2}, checkpoint={"save_every": 1, "keep_last": 0})
    worker = run_to_end(config)
    assert all(s.kl is not None for s in worker.of(m.Step))
    out = tmp_path / "out"
    base = _weights(tiny_model / "model.safetensors")
    before = _weights(out / "checkpoint-1" / "reference.safetensors")  # step 1: no sync yet
    assert all(np.array_equal(before[k], base[k]) for k in base)
    synced = _weights(out / "checkpoint-2" / "reference.safetensors")
    policy = _weights(out / "checkpoint-2" / "model.safetensors")
    moved = 0.0
    for name, value in synced.items():
        np.testing.assert_allclose(value, 0.6 * policy[name] + 0.4 * base[name], rtol=1e-5, atol=1e-6, err_msg=name)
        moved = max(moved, float(np.abs(value - base[name]).max()))
    assert moved > 1e-3  # the policy had moved: the reference is not the base any more
    # step 3 is no sync step: the reference stays as step 2 left it
    after = _weights(out / "final" / "reference.safetensors")
    assert all(np.array_equal(after[k], synced[k]) for k in synced)


def test_a_resumed_run_keeps_the_synced_reference(tmp_path, tiny_model):
    settings = dict(rewards=None, grpo={"group_size": 4, "beta": 0.05, "sync_ref_model": True,
                                        "ref_model_sync_steps": 1},
                    training={"max_steps": 4, "learning_rate": 5e-2}, checkpoint={"save_every": 2})
    kls = {}
    for name in ("straight", "split"):
        folder = tmp_path / name
        folder.mkdir()
        settings["rewards"] = reward_config(folder, "varied")
        config = write_config(folder, tiny_model, **settings)
        if name == "split":
            first = WorkerProcess(config)
            first.wait_for(m.Checkpoint, lambda c: c.step == 2)
            first.kill()
        worker = run_to_end(config)
        kls[name] = {s.step: (s.kl, s.loss) for s in worker.of(m.Step)}
    for step in (3, 4):
        assert kls["split"][step] == pytest.approx(kls["straight"][step], rel=1e-5, abs=1e-8)
    assert kls["straight"][3][0] > 0


# ---------------------------------------------------------------- a judge model as a reward

def test_a_judge_models_verdicts_are_the_stored_rewards(tmp_path, tiny_model):
    """The tiny judge says "yes" exactly when its input holds a digit; the policy's random bytes
    hold one now and then. Stored scores follow the verdict; the judge's time is in the step."""
    from tests.helpers.judge_model import build_digit_judge

    judge = build_digit_judge(tmp_path / "judge")
    rewards = (f'[[rewards]]\njudge = {{ model = "{judge}", prompt = "Answer: {{completion}}", batch_size = 3 }}\n'
               '[[rewards]]\nname = "length"\nweight = 0.0\n')
    config = write_config(tmp_path, tiny_model, rewards=rewards, grpo={"group_size": 4},
                          training={"max_steps": 2, "memory_limit_gb": 8.0})
    worker = run_to_end(config)
    rows = query(tmp_path / "out" / "outputs.db",
                 "SELECT raw_completion, json_extract(reward_details, '$.judge') FROM generations")
    verdicts = [any(ch.isdigit() for ch in text) for text, _ in rows]
    assert len(rows) == 16 and any(verdicts) and not all(verdicts)
    assert [score for _, score in rows] == pytest.approx([1.0 if v else 0.0 for v in verdicts], abs=1e-6)
    for step in worker.of(m.Step):
        assert 0 < step.extra_metrics["judge/seconds"] * 1000 <= step.scoring_ms
    assert any("memory_limit_gb = 8" in e.message for e in worker.of(m.Log))
