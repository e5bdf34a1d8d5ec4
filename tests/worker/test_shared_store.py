"""``store.path``: a store outside the output folder, shared by several runs (as mlx-node's
outputStore.localPath), through the real worker: each run its own row, a resume touching only its
own steps, and the run folder leading ``browse``, ``attach`` and the Database tab to it."""

from __future__ import annotations

from grpo_tui.protocol import messages as m
from grpo_tui.tui.runs import store_of
from tests.helpers.worker_harness import WorkerProcess, query, reward_config, tiny_model, write_config

__all__ = ["tiny_model"]


def run(folder, model, store, rewards, **training) -> WorkerProcess:
    config = write_config(folder, model, rewards=rewards, store={"path": str(store)},
                          training={"silent_patience": 0, **training})
    worker = WorkerProcess(config)
    worker.wait_for(m.Complete)
    assert worker.finish() == 0, worker.stderr.decode()[-2000:]
    return worker


def test_two_runs_share_one_store_outside_their_folders_and_a_resume_keeps_the_other(tmp_path, tiny_model):
    store = tmp_path / "shared" / "all-runs.db"
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first = run(tmp_path / "a", tiny_model, store, reward_config(tmp_path, "varied"))
    second = run(tmp_path / "b", tiny_model, store, reward_config(tmp_path, "varied"), max_steps=2)
    assert not (tmp_path / "a" / "out" / "outputs.db").exists() and not (tmp_path / "b" / "out" / "outputs.db").exists()
    [a_path] = first.of(m.DatabasePath)
    [b_path] = second.of(m.DatabasePath)
    assert a_path.path == b_path.path == str(store) and a_path.run_id != b_path.run_id  # what the Database tab opens
    steps = query(store, "SELECT run_id, count(*) FROM steps GROUP BY run_id ORDER BY run_id")
    assert steps == [(a_path.run_id, 4), (b_path.run_id, 2)]
    assert query(store, "SELECT status FROM runs ORDER BY id") == [("completed",), ("completed",)]

    # run a again from its checkpoint at step 2: only its own later steps are replaced
    config = write_config(tmp_path / "a", tiny_model, rewards=reward_config(tmp_path, "varied"), store={"path": str(store)},
                          training={"silent_patience": 0}, checkpoint={"resume": str(tmp_path / "a" / "out" / "checkpoint-2")})
    again = WorkerProcess(config)
    again.wait_for(m.Complete)
    assert again.finish() == 0
    assert again.of(m.ResumeState)[0].step == 2
    assert query(store, "SELECT run_id, count(*) FROM steps GROUP BY run_id ORDER BY run_id") == steps
    assert store_of(tmp_path / "a" / "out") == store  # grpo-tui browse/attach of the run folder
