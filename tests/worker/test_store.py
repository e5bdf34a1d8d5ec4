"""The worker's store: one transaction per step, tool calls, resume deletes, history."""

from __future__ import annotations

import json
import sqlite3

import pytest

from grpo_tui.protocol.messages import Step, ToolCall
from grpo_tui.protocol.schema import SCHEMA_VERSION, check_readable
from grpo_tui.worker.trainer_contract import Generation, StepOutput
from grpo_tui.worker.store import Store
from tests.helpers.records import generation


def output(step: int, loss: float | None = 0.1, reward: float = 0.5, tool_calls=()) -> StepOutput:
    metrics = Step(step=step, epoch=0, loss=loss, reward=reward, rewards={"accuracy": reward}, num_tokens=100)
    gens = [generation(p, g, reward + g, tool_calls if g == 0 else ()) for p in range(2) for g in range(2)]
    return StepOutput(metrics=metrics, generations=gens)


def rows(db, sql, *args):
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return conn.execute(sql, args).fetchall()
    finally:
        conn.close()


@pytest.fixture
async def store(tmp_path):
    s = await Store.open(tmp_path / "outputs.db")
    yield s
    await s.close()


async def test_a_step_is_written_with_every_generation_tool_call_and_queued_log(store):
    run = await store.create_run("demo", "tiny", "/models/tiny", {"a": 1}, 10)
    calls = [
        ToolCall(index=0, name="add", arguments={"a": 1, "b": 2}, raw='{"name": "add", "arguments": {"a": 1, "b": 2}}'),
        ToolCall(index=1, name=None, status="invalid_json", error="Expecting value", raw="{oops"),
    ]
    store.queue_log(1, "warning", "something worth telling")
    await store.write_step(run, output(1, tool_calls=calls))

    db = store.path
    with sqlite3.connect(db) as conn:
        assert check_readable(conn) == SCHEMA_VERSION
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    assert rows(db, "SELECT step, loss, reward, rewards FROM steps") == [(1, 0.1, 0.5, '{"accuracy": 0.5}')]
    gens = rows(db, "SELECT prompt_index, group_index, reward, reward_details, thinking, finish_reason FROM generations")
    assert len(gens) == 4 and gens[0] == (0, 0, 0.5, json.dumps({"accuracy": 0.5, "xml_format": None}), "hm", "stop")
    stored = rows(db, "SELECT g.prompt_index, t.call_index, t.name, t.arguments, t.status, t.error FROM tool_calls t "
                      "JOIN generations g ON g.id = t.generation_id ORDER BY g.id, t.call_index")  # fmt: skip
    assert stored == [
        (0, 0, "add", '{"a": 1, "b": 2}', "ok", None), (0, 1, None, None, "invalid_json", "Expecting value"),
        (1, 0, "add", '{"a": 1, "b": 2}', "ok", None), (1, 1, None, None, "invalid_json", "Expecting value"),
    ]  # fmt: skip
    assert rows(db, "SELECT step, level, message FROM logs") == [(1, "warning", "something worth telling")]
    assert rows(db, "SELECT count(*) FROM generations_fts WHERE generations_fts MATCH 'answer'") == [(4,)]


async def test_a_failed_step_write_leaves_nothing_behind(store):
    run = await store.create_run("demo", "tiny", "/m", {}, 10)
    await store.write_step(run, output(1))
    with pytest.raises(sqlite3.IntegrityError):  # the same step twice: UNIQUE(run_id, step)
        await store.write_step(run, output(1, reward=9.0))
    assert rows(store.path, "SELECT count(*), max(reward) FROM generations") == [(4, 1.5)]
    await store.write_step(run, output(2))  # the connection is usable after the rollback
    assert rows(store.path, "SELECT step FROM steps ORDER BY step") == [(1,), (2,)]


async def test_non_finite_values_are_stored_as_null(store):
    run = await store.create_run("demo", "tiny", "/m", {}, 10)
    out = output(1, loss=float("nan"))
    out.generations[0].advantage = float("inf")
    await store.write_step(run, out)
    assert rows(store.path, "SELECT loss FROM steps") == [(None,)]
    assert rows(store.path, "SELECT advantage FROM generations WHERE prompt_index = 0 AND group_index = 0") == [(None,)]


async def test_a_shared_store_marks_only_its_own_folders_runs_abandoned(store):
    mine = await store.create_run("mine", "tiny", "/m", {"checkpoint": {"output_dir": "/runs/a"}}, 10)
    other = await store.create_run("live", "tiny", "/m", {"checkpoint": {"output_dir": "/runs/b"}}, 10)
    assert await store.mark_abandoned_runs("/runs/a") == 1
    assert rows(store.path, "SELECT id, status FROM runs ORDER BY id") == [(mine, "crashed"), (other, "running")]


async def test_reopening_a_run_deletes_everything_after_the_checkpoint_step(store):
    run = await store.create_run("demo", "tiny", "/m", {}, 10)
    call = ToolCall(index=0, name="f", arguments={}, raw="{}")
    for step in range(1, 6):
        store.queue_log(step, "info", f"log {step}")
        await store.write_step(run, output(step, reward=step / 10, tool_calls=[call]))
    assert await store.mark_abandoned_runs("/runs/demo") == 1  # the worker died: it was left "running"
    assert rows(store.path, "SELECT status, ended_at IS NOT NULL FROM runs") == [("crashed", 1)]

    assert await store.reopen_run(run, 3, 10)
    assert await store.reopen_run(999, 3, 10) is False
    db = store.path
    assert rows(db, "SELECT status, ended_at FROM runs") == [("running", None)]
    assert rows(db, "SELECT max(step), count(*) FROM steps") == [(3, 3)]
    assert rows(db, "SELECT max(step), count(*) FROM generations") == [(3, 12)]
    assert rows(db, "SELECT count(*) FROM tool_calls") == [(6,)]
    assert rows(db, "SELECT count(*) FROM generations_fts") == [(12,)]
    assert rows(db, "SELECT max(step) FROM logs") == [(3,)]
    assert await store.last_step(run) == 3


async def test_history_and_aggregates_for_resume_state(store):
    run = await store.create_run("demo", "tiny", "/m", {}, 10)
    for step, (loss, reward) in enumerate([(0.4, 0.1), (0.2, 0.7), (0.3, 0.4)], start=1):
        await store.write_step(run, output(step, loss=loss, reward=reward))
    history, agg = await store.history(run)
    assert [(h.step, h.loss, h.reward) for h in history] == [(1, 0.4, 0.1), (2, 0.2, 0.7), (3, 0.3, 0.4)]
    assert (agg.best_reward, agg.best_loss, agg.total_tokens) == (0.7, 0.2, 300)
    assert agg.avg_reward == pytest.approx(0.4) and agg.avg_loss == pytest.approx(0.3)
    assert history[0].rewards == {"accuracy": 0.1} and history[0].completion_rewards == [0.1, 1.1, 0.1, 1.1]
    assert (history[0].completion_min_length, history[0].completion_max_length) == (7.0, 7.0)
    recent, whole = await store.history(run, limit=2)  # the frame holds the charts' last steps, the totals all
    assert [h.step for h in recent] == [2, 3] and (whole.reward_steps, whole.loss_steps) == (3, 3)

    await store.finish_run(run, "completed")
    assert rows(store.path, "SELECT status FROM runs") == [("completed",)]


async def test_closing_folds_the_wal_so_outputs_db_alone_holds_the_run(tmp_path):
    """A user who copies only outputs.db (not -wal/-shm) still gets every step, even when a
    read-only reader (the dashboard) was attached and closes after the worker."""
    db = tmp_path / "outputs.db"
    s = await Store.open(db)
    run_id = await s.create_run(name="r", model="m", model_path="/m", config={}, total_steps=2)
    reader = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    reader.execute("SELECT count(*) FROM steps").fetchall()
    for step in (1, 2):
        await s.write_step(run_id, output(step))
    await s.close()
    reader.close()
    copy = tmp_path / "copy.db"
    copy.write_bytes(db.read_bytes())
    assert rows(copy, "SELECT step FROM steps ORDER BY step") == [(1,), (2,)]


async def test_what_reward_functions_logged_is_stored_with_the_step_and_each_generation(store):
    run = await store.create_run("demo", "tiny", "/models/tiny", {"a": 1}, 10)
    out = output(1)
    out.metrics.extra_metrics = {"mean_ids": 6.5}
    out.generations[1].reward_notes = {"json_schema": "$.a: 'x' is not of type 'integer'"}
    await store.write_step(run, out)
    assert rows(store.path, "SELECT extra_metrics FROM steps") == [('{"mean_ids": 6.5}',)]
    notes = rows(store.path, "SELECT reward_notes FROM generations ORDER BY id")
    assert notes[1] == ('{"json_schema": "$.a: \'x\' is not of type \'integer\'"}',) and notes[0] == (None,)


async def test_a_step_of_several_ranks_keeps_each_ranks_timings(store):
    from grpo_tui.protocol.messages import RankTiming

    step = output(1)
    step.metrics.ranks = [RankTiming(rank=r, generation_ms=10.0 + r, training_ms=5.0, all_reduce_ms=1.5) for r in range(2)]
    step.metrics.slowest_rank, step.metrics.all_reduce_bytes = 1, 4096
    await store.write_step(await store.create_run("ranks", "tiny", "/models/tiny", {}, 10), step)
    ranks, slowest, sent = rows(store.path, "SELECT ranks, slowest_rank, all_reduce_bytes FROM steps")[0]
    assert json.loads(ranks)[1] == {"rank": 1, "generation_ms": 11.0, "training_ms": 5.0, "all_reduce_ms": 1.5}
    assert (slowest, sent) == (1, 4096)


async def test_a_version_1_store_is_upgraded_in_place_keeping_its_rows(tmp_path):
    from grpo_tui.protocol.schema import MIGRATIONS

    path = tmp_path / "outputs.db"
    with sqlite3.connect(path) as conn:  # a store written before reward functions could log
        conn.executescript(MIGRATIONS[1] + "\nINSERT INTO meta VALUES ('application', 'grpo-tui');"
                           "\nINSERT INTO meta VALUES ('schema_version', '1');"
                           "\nINSERT INTO runs (name, started_at) VALUES ('old', 0);"
                           "\nINSERT INTO steps (run_id, step, epoch, loss, created_at) VALUES (1, 1, 0, 0.25, 0);")
    s = await Store.open(path)
    try:
        run = await s.create_run("new", "tiny", "/models/tiny", {}, 10)
        await s.write_step(run, output(1))
    finally:
        await s.close()
    assert rows(path, "SELECT run_id, step, loss, extra_metrics FROM steps ORDER BY id") == [(1, 1, 0.25, None), (2, 1, 0.1, "{}")]
    with sqlite3.connect(path) as conn:
        assert check_readable(conn) == SCHEMA_VERSION == max(MIGRATIONS)


async def test_a_greedy_and_a_sampled_eval_at_one_step_are_two_rows_also_in_a_store_from_version_6(tmp_path):
    from grpo_tui.protocol.messages import Eval
    from grpo_tui.protocol.schema import MIGRATIONS

    path = tmp_path / "outputs.db"
    with sqlite3.connect(path) as conn:  # a store written before eval.also_sampled, with one eval row
        conn.executescript("".join(MIGRATIONS[v] for v in range(1, 7))
                           + "\nINSERT INTO meta VALUES ('application', 'grpo-tui');"
                           "\nINSERT INTO meta VALUES ('schema_version', '6');"
                           "\nINSERT INTO runs (name, started_at) VALUES ('old', 0);"
                           "\nINSERT INTO evals (run_id, step, accuracy, num_prompts, num_samples, greedy, created_at)"
                           " VALUES (1, 0, 0.5, 10, 1, 1, 0);")
    s = await Store.open(path)
    try:
        for greedy, accuracy in ((True, 0.25), (False, 0.125), (True, 0.75)):  # the last replaces the first
            await s.write_eval(1, Eval(step=3, accuracy=accuracy, num_prompts=4, greedy=greedy))
        stored = [(e.step, e.greedy, e.accuracy) for e in await s.evals(1)]
    finally:
        await s.close()
    assert stored == [(0, True, 0.5), (3, True, 0.75), (3, False, 0.125)]


async def test_a_version_7_store_gets_the_live_changes_table_and_a_resume_replays_only_later_ones(tmp_path):
    from grpo_tui.protocol.messages import SettingChanged
    from grpo_tui.protocol.schema import MIGRATIONS

    path = tmp_path / "outputs.db"
    with sqlite3.connect(path) as conn:  # a store written before live changes
        conn.executescript("".join(MIGRATIONS[v] for v in range(1, 8))
                           + "\nINSERT INTO meta VALUES ('application', 'grpo-tui');"
                           "\nINSERT INTO meta VALUES ('schema_version', '7');"
                           "\nINSERT INTO runs (name, started_at) VALUES ('old', 0);")
    s = await Store.open(path)
    try:
        for step, value in ((3, 5e-6), (7, 1e-6)):
            await s.write_change(1, SettingChanged(step=step, key="training.learning_rate", old=1e-5, new=value,
                                                   source="cli"))
        later = [(c.step, c.new, c.source) for c in await s.changes(1, after=4)]
        assert await s.reopen_run(1, 4, 10)  # a resume at step 4: what came after is replayed, so it goes
        kept = [(c.step, c.new) for c in await s.changes(1)]
    finally:
        await s.close()
    assert later == [(7, 1e-6, "cli")]
    assert kept == [(3, 5e-6)]
