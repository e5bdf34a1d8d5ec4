"""``from grpo_tui import Engine``: the trainer step by step in the caller's process, equal to the
worker's steps, with the caller's own rewards, a store ``grpo-tui browse`` opens, save and load."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest
from mlx.utils import tree_flatten

from grpo_tui import Engine
from grpo_tui.protocol import messages as m
from grpo_tui.protocol.config import load_config
from grpo_tui.worker.engine.stepwise import EngineError
from tests.helpers.worker_harness import WorkerProcess, query, reward_config, tiny_model, write_config

__all__ = ["tiny_model"]


def weights(model) -> dict[str, np.ndarray]:
    return {k: np.array(v) for k, v in tree_flatten(model.trainable_parameters())}


def test_three_engine_steps_equal_three_worker_steps(tmp_path, tiny_model):
    config = write_config(tmp_path, tiny_model, rewards=reward_config(tmp_path, "varied"),
                          training={"max_steps": 3, "silent_patience": 0}, checkpoint={"save_every": 0})
    worker = WorkerProcess(config)
    worker.wait_for(m.Complete)
    assert worker.finish() == 0, worker.stderr.decode()[-2000:]
    engine = Engine(config)
    steps = []
    for _ in range(3):
        batch = engine.generate()  # the dataset's next batch, as the worker's
        assert len(batch.texts) == 4 and len(engine.score(batch)) == 4  # 2 prompts × group 2
        steps.append(engine.train_step(batch))
    by_worker = worker.of(m.Step)
    assert [s.step for s in steps] == [1, 2, 3]
    for ours, theirs in zip(steps, by_worker):
        assert ours.reward == pytest.approx(theirs.reward, abs=1e-6)
        assert ours.loss == pytest.approx(theirs.loss, abs=1e-6)
    final = mx.load(str(tmp_path / "out" / "final" / "model.safetensors"))
    mine = weights(engine.trainer.policy.model)
    compared = [k for k in mine if k in final]
    assert compared and all(np.allclose(mine[k], np.array(final[k]), atol=1e-5) for k in compared)
    start = mx.load(str(next(tiny_model.glob("*.safetensors"))))
    assert any(not np.allclose(mine[k], np.array(start[k])) for k in compared if k in start)  # they trained


def test_the_callers_rewards_train_and_a_store_records_the_steps(tmp_path, tiny_model):
    config = load_config(write_config(tmp_path, tiny_model, training={"silent_patience": 0}))
    with Engine(config, store=tmp_path / "engine.db") as engine:
        batch = engine.generate(["What is 2 + 2?", [{"role": "user", "content": "What is 3 + 3?"}]])
        assert [e.prompt for e in batch.examples][0] == "What is 2 + 2?" and len(batch.completions) == 4
        with pytest.raises(EngineError, match="3 rewards for 4 completions"):
            engine.train_step(batch, [1.0, 0.0, 1.0])
        step = engine.train_step(batch, [1.0, 0.0, float("nan"), 0.5])  # NaN: no score, as TRL takes it
        assert step.step == 1 and step.rewards == {"reward": pytest.approx(0.5)}
        assert engine.step_once().step == 2
        with pytest.raises(EngineError, match="generate a new batch"):
            engine.train_step(batch)
        saved = engine.save(tmp_path / "checkpoint-2")
        result = engine.evaluate(limit=2)
        assert result.num_prompts == 2 and result.step == 2
    assert query(tmp_path / "engine.db", "SELECT step FROM steps ORDER BY step") == [(1,), (2,)]
    assert query(tmp_path / "engine.db", "SELECT count(*) FROM generations") == [(8,)]
    assert query(tmp_path / "engine.db", "SELECT status FROM runs") == [("completed",)]
    with pytest.raises(RuntimeError), Engine(config, store=tmp_path / "engine.db") as resumed:
        assert resumed.load(saved) == 2  # the store's run goes on: no second run
        assert resumed.step_once().step == 3
        raise RuntimeError("the caller's loop failed")
    assert query(tmp_path / "engine.db", "SELECT id, status FROM runs") == [(1, "crashed")]  # not "completed"
    assert query(tmp_path / "engine.db", "SELECT step FROM steps ORDER BY step") == [(1,), (2,), (3,)]
    again = Engine(config)
    assert again.load(saved) == 2
    assert all(np.array_equal(a, b) for a, b in zip(weights(again.trainer.policy.model).values(), weights(engine.trainer.policy.model).values()))
    assert again.generate().step == 3


def test_an_engine_over_an_async_config_says_it_generates_nothing_ahead(tmp_path, tiny_model):
    config = write_config(tmp_path, tiny_model, **{"async": {"max_staleness": 1}})
    with pytest.raises(EngineError, match="async.max_staleness = 1: the engine runs each phase when you call it"):
        Engine(config)
