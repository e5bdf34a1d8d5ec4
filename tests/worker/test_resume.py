"""Resume: exact continuation, SIGKILL at a random moment, explicit paths, fresh starts."""

from __future__ import annotations

import time

import mlx.core as mx
import mlx_lm
import pytest

from grpo_tui.protocol import messages as m
from grpo_tui.tui.state import RunState
from tests.helpers.worker_harness import WorkerProcess, query, reward_config, tiny_model, write_config

__all__ = ["tiny_model"]


def run_to_end(config, *args: str, **env) -> WorkerProcess:
    worker = WorkerProcess(config, *args, env=env)
    worker.wait_for(m.Complete)
    assert worker.finish() == 0, worker.stderr.decode()[-2000:]
    return worker


@pytest.mark.slow
def test_three_steps_then_resume_then_three_equals_six_straight(tmp_path, tiny_model):
    """Tolerance: bit-identical (atol = 0). Seeds per step + a pure batch order make it so."""
    settings = dict(training={"max_steps": 6, "num_epochs": 2}, checkpoint={"save_every": 0})
    straight, split = tmp_path / "straight", tmp_path / "split"
    for folder in (straight, split):
        folder.mkdir()
    run_to_end(write_config(straight, tiny_model, rewards=reward_config(straight, "varied"), **settings))

    rewards = reward_config(split, "varied")
    run_to_end(write_config(split, tiny_model, rewards=rewards, training={"max_steps": 3, "num_epochs": 2}))
    resumed = run_to_end(write_config(split, tiny_model, rewards=rewards, **settings))
    state = resumed.of(m.ResumeState)[0]
    assert (state.step, len(state.history)) == (3, 3)
    assert [e.step for e in resumed.of(m.Step)] == [4, 5, 6]

    a = mx.load(str(straight / "out" / "final" / "model.safetensors"))
    b = mx.load(str(split / "out" / "final" / "model.safetensors"))
    start = mx.load(str(tiny_model / "model.safetensors"))
    assert a.keys() == b.keys()
    assert max(mx.abs(a[k] - b[k]).max().item() for k in a) == 0.0
    assert max(mx.abs(a[k] - start[k]).max().item() for k in a) > 1e-4  # training did move the weights
    one, two = (query(f / "out" / "outputs.db", "SELECT step, loss, reward FROM steps ORDER BY step") for f in (straight, split))
    assert one == two


def test_a_resume_brings_back_every_series_the_charts_tab_drew(tmp_path, tiny_model):
    rewards = reward_config(tmp_path, "varied")
    first = run_to_end(write_config(tmp_path, tiny_model, rewards=rewards, training={"max_steps": 2}))
    resumed = run_to_end(write_config(tmp_path, tiny_model, rewards=rewards, training={"max_steps": 3}))
    live, again = RunState(clock=time.monotonic), RunState(clock=time.monotonic)
    for step in first.of(m.Step):
        live.apply(step)
    again.apply(resumed.of(m.ResumeState)[0])
    assert {"perplexity", "token_accuracy", "advantage_std", "generation_ms", "training_ms", "step_ms",
            "completion_min_length", "completion_max_length", "entropy", "grad_norm"} <= set(live.book.keys())
    assert sorted(again.book.keys()) == sorted(live.book.keys())
    assert {k: again.book.column(k) for k in live.book.keys()} == {k: live.book.column(k) for k in live.book.keys()}
    assert [sorted(r.rewards) for r in again.spread.rows] == [sorted(r.rewards) for r in live.spread.rows]
    assert again.totals.best_reward == live.totals.best_reward
    assert again.totals.mean_loss == pytest.approx(live.totals.mean_loss)


@pytest.mark.slow
def test_sigkill_mid_run_then_resume_keeps_every_step_once(tmp_path, tiny_model, kill_after_step=5, delay_s=0.05):
    config = write_config(
        tmp_path, tiny_model, rewards=reward_config(tmp_path, "slow"),
        training={"max_steps": 0, "num_epochs": 3}, checkpoint={"save_every": 4, "keep_last": 1},
    )  # fmt: skip
    env = {"SLOW_REWARD_S": "0.1"}
    worker = WorkerProcess(config, env=env)
    worker.wait_for(m.Step, lambda e: e.step == kill_after_step)
    time.sleep(delay_s)
    worker.kill()

    db, out = tmp_path / "out" / "outputs.db", tmp_path / "out"
    committed = query(db, "SELECT step, count(*) FROM steps GROUP BY step ORDER BY step")
    last = committed[-1][0]
    assert [s for s, n in committed] == list(range(1, last + 1)) and all(n == 1 for _, n in committed)
    assert query(db, "SELECT max(step) FROM generations") == [(last,)]
    assert query(db, "SELECT status FROM runs") == [("running",)]

    resumed = run_to_end(config, **env)
    state = resumed.of(m.ResumeState)[0]
    assert state.step == 4 and [h.step for h in state.history] == [1, 2, 3, 4]
    assert resumed.of(m.Step)[0].step == 5  # steps 5..last are redone: the kill cost last - 4 steps
    rows = query(db, "SELECT step, count(*) FROM steps GROUP BY step ORDER BY step")
    assert rows == [(s, 1) for s in range(1, 13)]
    assert query(db, "SELECT step, count(*) FROM generations GROUP BY step") == [(s, 4) for s in range(1, 13)]
    assert query(db, "SELECT count(*) FROM generations_fts") == [(48,)]
    assert query(db, "SELECT id, status FROM runs") == [(1, "completed")]
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == ["checkpoint-8", "final"]
    assert mlx_lm.load(str(out / "checkpoint-8"))[0] is not None


def test_resume_from_an_explicit_path_warns_when_the_dataset_changed(tmp_path, tiny_model):
    rewards = reward_config(tmp_path, "varied")
    run_to_end(write_config(tmp_path, tiny_model, rewards=rewards, checkpoint={"keep_last": 0}))
    checkpoint = tmp_path / "out" / "checkpoint-2"
    config = write_config(tmp_path, tiny_model, rewards=rewards, checkpoint={"resume": str(checkpoint)})
    with open(tmp_path / "data.jsonl", "a") as f:  # write_config rewrote it; change it after
        f.write('{"prompt": "What is 8 + 8?", "answer": "16"}\n')
    worker = run_to_end(config)
    assert worker.of(m.ResumeState)[0].step == 2
    assert any(e.level == "warning" and "dataset changed" in e.message and "8 -> 9 rows" in e.message
               for e in worker.of(m.Log))


def test_a_resume_over_rows_whose_text_changed_says_the_content_changed(tmp_path, tiny_model):
    rewards = reward_config(tmp_path, "varied")
    run_to_end(write_config(tmp_path, tiny_model, rewards=rewards, checkpoint={"keep_last": 0}))
    config = write_config(tmp_path, tiny_model, rewards=rewards, checkpoint={"resume": str(tmp_path / "out" / "checkpoint-2")})
    data = tmp_path / "data.jsonl"
    data.write_text(data.read_text().replace("What is 1 + 2?", "What is 2 + 1?"))  # as many rows, one reworded
    worker = run_to_end(config)
    [warning] = [e.message for e in worker.of(m.Log) if "dataset changed" in e.message]
    assert "the same 8 rows, but their content changed" in warning


def test_resume_false_starts_a_new_run_and_sets_old_checkpoints_aside(tmp_path, tiny_model):
    rewards = reward_config(tmp_path, "varied")
    run_to_end(write_config(tmp_path, tiny_model, rewards=rewards))
    worker = run_to_end(write_config(tmp_path, tiny_model, rewards=rewards, checkpoint={"resume": False}))
    assert not worker.of(m.ResumeState) and worker.of(m.DatabasePath)[0].run_id == 2
    out = tmp_path / "out"
    aside = [p for p in out.iterdir() if p.name.startswith("previous-")]
    assert len(aside) == 1 and (aside[0] / "final" / "training_state.json").exists()
    assert query(out / "outputs.db", "SELECT id, status FROM runs") == [(1, "completed"), (2, "completed")]


def test_the_dashboards_restart_override_resumes_even_when_the_config_says_false(tmp_path, tiny_model):
    """After a crash the dashboard restarts the worker with --resume latest: the run must
    continue from its checkpoint, not start over, whatever checkpoint.resume says."""
    rewards = reward_config(tmp_path, "varied")
    run_to_end(write_config(tmp_path, tiny_model, rewards=rewards, training={"max_steps": 2}))
    config = write_config(tmp_path, tiny_model, rewards=rewards, checkpoint={"resume": False})
    worker = run_to_end(config, "--resume", "latest")
    assert worker.of(m.ResumeState)[0].step == 2
    assert [s.step for s in worker.of(m.Step)] == [3, 4]


def test_resume_flag_false_overrides_the_config(tmp_path, tiny_model):
    rewards = reward_config(tmp_path, "varied")
    run_to_end(write_config(tmp_path, tiny_model, rewards=rewards, training={"max_steps": 2}))
    worker = WorkerProcess(write_config(tmp_path, tiny_model, rewards=rewards), "--resume", "false")
    worker.wait_for(m.Complete)
    assert worker.finish() == 0
    assert not worker.of(m.ResumeState) and [s.step for s in worker.of(m.Step)] == [1, 2, 3, 4]


def test_a_run_that_reuses_generations_resumes_inside_a_block(tmp_path, tiny_model):
    """steps_per_generation = 2: the checkpoint after step 1 falls inside the block of steps 1-2, so
    the resumed run generates afresh for step 2 alone, then steps 3-4 share a generation."""
    rewards = reward_config(tmp_path, "varied")
    settings = dict(training={"steps_per_generation": 2}, checkpoint={"save_every": 1})
    run_to_end(write_config(tmp_path, tiny_model, rewards=rewards, **{**settings, "training": {"steps_per_generation": 2, "max_steps": 1}}))
    resumed = run_to_end(write_config(tmp_path, tiny_model, rewards=rewards, **settings))
    assert resumed.of(m.ResumeState)[0].step == 1
    assert [e.step for e in resumed.of(m.Step)] == [2, 3, 4]
    phases = [e.message for e in resumed.of(m.Status) if e.phase == "generating"]
    assert phases == ["step 2", "step 3"]  # step 2's own generation, then one for steps 3 and 4
    db = tmp_path / "out" / "outputs.db"
    assert query(db, "SELECT step, count(*) FROM generations GROUP BY step") == [(s, 4) for s in range(1, 5)]
    prompts = query(db, "SELECT step, prompt FROM generations WHERE group_index = 0 ORDER BY step, prompt_index")
    assert len({p for _, p in prompts}) == 8  # each step trained its own two prompts of the eight
