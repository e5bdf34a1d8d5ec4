"""The run state folds protocol events the way the header, tiles and chart show them."""

from typing import get_args

import pytest

from grpo_tui.protocol import messages as m
from grpo_tui.protocol.control import refusal
from grpo_tui.tui.format import duration, number
from grpo_tui.tui.run_events import (
    DashboardEvent,
    DashboardNote,
    OpenedReadOnly,
    PauseAsked,
    RestartBegan,
    RunAge,
    RunFailed,
    StopAsked,
    WorkerEnded,
    WorkerSilent,
)
from grpo_tui.tui.state import RunState, ema, log_entry_for
from tests.helpers.every_message import EVENTS
from tests.helpers.worker_harness import tiny_model

__all__ = ["tiny_model"]  # the fixture, imported for pytest


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_ema_matches_hand_computed_values():
    assert ema([1.0, 2.0, 3.0], 0.0) == [1.0, 2.0, 3.0]
    # debiased: first value is kept, then 0.5 * prev + 0.5 * new, divided by 1 - 0.5^n
    out = ema([2.0, 4.0], 0.5)
    assert out[0] == pytest.approx(2.0) and out[1] == pytest.approx((0.5 * 1.0 + 2.0) / 0.75)
    assert ema([1.0, None, 1.0], 0.9) == [pytest.approx(1.0), None, pytest.approx(1.0)]


def test_steps_fill_history_progress_and_eta():
    clock = Clock()
    s = RunState(clock=clock)
    s.apply(m.Init(model="x", model_path="/x", total_steps=10, steps_per_epoch=5, num_epochs=2))
    for step in (1, 2):
        dirty = s.apply(m.Step(step=step, epoch=1, loss=float(step), reward=0.5, num_tokens=100,
                               generation_ms=600.0, scoring_ms=100.0, training_ms=300.0))
    assert {"metrics", "progress", "header"} <= dirty
    assert s.status == "running" and s.step == 2 and s.step_in_epoch == 2 and s.total_tokens == 200
    assert s.series("loss") == [1.0, 2.0]
    assert s.eta_seconds() == pytest.approx(8 * 1.0)  # 8 steps left at 1 s each
    clock.now = 165.0
    assert duration(s.elapsed()) == "1m05s"


def test_the_eta_leaves_out_each_workers_first_step_which_compiles():
    s = RunState(clock=Clock())
    s.apply(m.Init(model="x", model_path="/x", total_steps=200, steps_per_epoch=200, num_epochs=1))
    s.apply(m.Hello(worker_version="1", protocol_version=m.PROTOCOL_VERSION, pid=1))
    s.apply(m.Step(step=1, epoch=0, loss=0.1, reward=0.5, num_tokens=10, generation_ms=20_000.0, training_ms=2_000.0))
    assert s.eta_seconds() is None  # not "1h13m" from a step that was mostly compiling
    s.apply(m.Step(step=2, epoch=0, loss=0.1, reward=0.5, num_tokens=10, generation_ms=80.0, training_ms=20.0))
    assert s.eta_seconds() == pytest.approx(198 * 0.1)
    s.apply(m.Hello(worker_version="1", protocol_version=m.PROTOCOL_VERSION, pid=1))  # a restart compiles again
    s.apply(m.Step(step=3, epoch=0, loss=0.1, reward=0.5, num_tokens=10, generation_ms=20_000.0, training_ms=0.0))
    assert s.eta_seconds() == pytest.approx(197 * 0.1)


def test_nan_metrics_are_gaps_not_crashes():
    s = RunState(clock=Clock())
    s.apply(m.Step(step=1, epoch=1, loss=None, reward=float("nan")))
    assert s.series("loss") == [None] and s.series("reward") == [None]


def test_resume_state_replaces_history():
    s = RunState(clock=Clock())
    s.apply(m.Step(step=9, epoch=1, loss=9.0))
    s.apply(m.ResumeState(step=4, epoch=1, total_epochs=2, step_in_epoch=4, steps_per_epoch=5,
                          history=[m.Step(step=i, epoch=1, loss=float(i)) for i in range(1, 5)],
                          aggregates=m.Aggregates(total_tokens=1234, best_loss=0.5, avg_loss=2.0, loss_steps=6)))
    assert list(s.history_steps) == [1, 2, 3, 4] and s.series("loss") == [1.0, 2.0, 3.0, 4.0]
    assert s.step == 4 and s.total_tokens == 1234
    # the run's totals cover the steps older than the history too, and go on from them
    assert (s.totals.best_loss, s.totals.mean_loss) == (0.5, 2.0)
    s.apply(m.Step(step=5, epoch=1, loss=9.0))
    assert s.totals.mean_loss == 3.0


def test_pause_resume_complete_and_zero_std():
    clock = Clock()
    s = RunState(clock=clock)
    s.apply(m.Step(step=1, epoch=1, frac_reward_zero_std=1.0, loss=0.0))
    assert s.zero_std
    s.apply(m.Paused(step=1))
    assert s.status == "paused"
    s.apply(m.Resumed(step=1))
    assert s.status == "running"
    s.apply(m.Complete(total_steps=1, seconds=3.0, status="stopped"))
    clock.now += 50
    assert s.status == "done" and s.elapsed() == 0.0 and s.eta_seconds() is None  # the clock stops


def test_only_fatal_errors_change_the_status():
    s = RunState(clock=Clock())
    s.apply(m.Error(message="resume while not paused"))
    assert s.status == "starting"
    s.apply(m.Error(message="out of memory", fatal=True))
    assert s.status == "error" and s.error == "out of memory"


def test_samples_keep_the_latest_step_only():
    s = RunState(clock=Clock())
    for step in (1, 2):
        for i in range(3):
            s.apply(m.Sample(step=step, index=i, group=0, prompt="p", completion="c"))
    assert [x.step for x in s.samples] == [2, 2, 2]


def test_log_entries_for_events():
    assert log_entry_for(m.Log(level="warning", message="w")).level == "warning"
    assert "checkpoint (manual) at step 3" in log_entry_for(m.Checkpoint(path="/p", step=3, kind="manual")).message
    assert log_entry_for(m.Step(step=1, epoch=1)) is None


@pytest.mark.parametrize("value, text", [(None, "—"), (float("inf"), "—"), (0.5, "0.5"), (123456.0, "123,456"),
                                         (0.0, "0"), (1234.5, "1,234"), (5.59375, "5.594"), (0.00481, "0.0048"),
                                         (-0.00003, "-3.00e-05"), (2e-4, "0.0002"), (3e7, "3.00e+07")])
def test_number(value, text):
    assert number(value) == text


def test_refusal_names_both_protocol_versions():
    assert refusal(m.Hello(protocol_version=m.PROTOCOL_VERSION, worker_version="x", pid=1)) is None
    reason = refusal(m.Hello(protocol_version=7, worker_version="x", pid=1))
    assert "protocol version 7" in reason and f"protocol version {m.PROTOCOL_VERSION}" in reason
    assert "a Step frame" in refusal(m.Step(step=1, epoch=0))


@pytest.mark.parametrize("event", EVENTS, ids=lambda e: type(e).__name__)
def test_every_event_type_folds(event):
    """An event type without a case in RunState.apply fails here (its ``assert_never``) instead of the
    dashboard silently dropping it; EVENTS holds one of every type (tests/protocol checks it)."""
    RunState(clock=lambda: 0.0).apply(event)


@pytest.mark.parametrize("event", [RunFailed("x"), WorkerEnded("x"), RestartBegan(1, False), StopAsked(), PauseAsked(),
                                   WorkerSilent(40.0, "running"), OpenedReadOnly(), RunAge(1.0), DashboardNote("info", "x")],
                         ids=lambda e: type(e).__name__)
def test_every_dashboard_event_folds(event):
    assert set(get_args(DashboardEvent)) == {RunFailed, WorkerEnded, RestartBegan, StopAsked, PauseAsked, WorkerSilent,
                                             OpenedReadOnly, RunAge, DashboardNote}
    RunState(clock=lambda: 0.0).apply(event)


def test_a_silent_worker_is_said_after_its_steps_and_its_next_frame_ends_it():
    now = [0.0]
    state = RunState(clock=lambda: now[0], stall_after_s=30.0)
    state.apply(m.Step(step=1, epoch=0, generation_ms=20_000.0, training_ms=20_000.0))  # 40 s steps
    now[0] = 100.0
    assert state.quiet_for() == 100.0 and state.silence_after() == 120.0  # three steps, not 30 s
    state.apply(WorkerSilent(100.0, "stopped (SIGSTOP or ctrl+z)"))
    assert state.silent is not None
    assert "header" in state.apply(m.Status(phase="training", message="")) and state.silent is None


def test_a_pause_asked_for_is_said_until_the_worker_pauses():
    state = RunState(clock=lambda: 0.0)
    state.status = "running"
    assert "header" in state.apply(PauseAsked()) and state.pausing
    state.apply(m.Paused(step=3))
    assert not state.pausing and state.status == "paused"


def test_apply_refuses_what_is_not_an_event():
    import pytest

    with pytest.raises(AssertionError):
        RunState(clock=lambda: 0.0).apply(object())  # type: ignore[arg-type]


def test_the_run_totals_after_a_resume_cover_the_whole_run(tmp_path, tiny_model):
    """mlx-node's stats after a resume: best and mean reward and loss over every step of the run, the
    resumed steps' history (from the real worker's resume_state) and the steps after it."""
    from tests.helpers.worker_harness import WorkerProcess, reward_config, write_config

    rewards = reward_config(tmp_path, "varied")
    first = WorkerProcess(write_config(tmp_path, tiny_model, rewards=rewards, training={"silent_patience": 0}))
    first.wait_for(m.Complete)
    assert first.finish() == 0
    early = {s.step: s for s in first.of(m.Step) if s.step <= 2}
    config = write_config(tmp_path, tiny_model, rewards=rewards, training={"silent_patience": 0},
                          checkpoint={"resume": str(tmp_path / "out" / "checkpoint-2")})
    again = WorkerProcess(config)
    again.wait_for(m.Complete)
    assert again.finish() == 0
    state = RunState(clock=lambda: 0.0)
    for event in again.events:
        state.apply(event)
    rewards_seen = [early[1].reward, early[2].reward] + [s.reward for s in again.of(m.Step)]
    losses = [early[1].loss, early[2].loss] + [s.loss for s in again.of(m.Step)]
    assert state.totals.best_reward == pytest.approx(max(rewards_seen))
    assert state.totals.mean_reward == pytest.approx(sum(rewards_seen) / len(rewards_seen))
    assert state.totals.mean_loss == pytest.approx(sum(losses) / len(losses))
