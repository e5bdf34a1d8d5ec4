"""``max_steps`` overrides ``num_epochs`` as in TRL: the run trains every step it was asked for,
repeating the data, and says the real totals (the dashboard's header and progress read them from ``init``)."""

from __future__ import annotations

from grpo_tui.protocol import messages as m
from grpo_tui.tui.state import RunState
from tests.helpers.worker_harness import WorkerProcess, tiny_model, write_config

__all__ = ["tiny_model"]


def test_max_steps_beyond_one_epoch_repeats_the_data_and_the_header_shows_the_real_total(tmp_path, tiny_model):
    # 8 prompts, batch 2: 4 steps an epoch; num_epochs = 1 used to end the run at step 4
    config = write_config(tmp_path, tiny_model, training={"max_steps": 10, "num_epochs": 1},
                          checkpoint={"save_every": 0})
    worker = WorkerProcess(config)
    worker.wait_for(m.Complete)
    assert worker.finish() == 0
    init = worker.of(m.Init)[0]
    assert (init.total_steps, init.num_epochs) == (10, 3)
    assert [s.step for s in worker.of(m.Step)] == list(range(1, 11))
    assert [(e.epoch, e.total_epochs, e.steps_in_epoch) for e in worker.of(m.EpochStart)] == [(0, 3, 4), (1, 3, 4), (2, 3, 2)]
    assert worker.of(m.Complete)[0].status == "completed"
    assert any("max_steps = 10 overrides num_epochs = 1" in e.message for e in worker.of(m.Log))
    state = RunState(clock=lambda: 0.0)
    for event in worker.events:
        state.apply(event)
    assert (state.step, state.total_steps, state.epoch + 1, state.total_epochs) == (10, 10, 3, 3)
