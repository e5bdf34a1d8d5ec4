"""How a worker's end, a restart, a mistake and a lost run show, decided by the run link and folded
by ``RunState.apply`` alone, without an app: the link answers a worker's exit or hello with what to
do, and the state shows what a person would read in the header and the log."""

from pathlib import Path
from types import SimpleNamespace

from grpo_tui.protocol import messages as m
from grpo_tui.tui.run_events import (
    DashboardNote,
    OpenedReadOnly,
    RestartBegan,
    RunAge,
    RunFailed,
    StopAsked,
    WorkerEnded,
)
from grpo_tui.tui.run_link import CloseCountdown, PushScreen, RunLink
from grpo_tui.tui.screens.crash import CrashScreen, MistakeScreen
from grpo_tui.tui.state import RunState, log_entry_for
from tests.tui.conftest import make_config


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def running(clock: Clock) -> RunState:
    state = RunState(clock=clock)
    state.apply(m.Hello(protocol_version=m.PROTOCOL_VERSION, worker_version="0.1.0", pid=7))
    state.apply(m.Status(phase="generating"))
    state.apply(m.Step(step=3, epoch=0, loss=0.5, reward=1.0))
    return state


def link(state: RunState, tmp_path: Path) -> RunLink:
    """A run link whose decisions are read here (no app: they ask none of it)."""
    return RunLink(SimpleNamespace(fold=lambda items: None), state, make_config(tmp_path), config_path="config.toml",  # type: ignore[arg-type]
                   worker_argv=[], run_dir=str(tmp_path), launch=False, stop_timeout_s=1.0)


def fold(state: RunState, decisions: list) -> list:
    """Fold the decisions' events as the app does; return what else was decided (dialogs, closing)."""
    rest = []
    for decision in decisions:
        if isinstance(decision, (PushScreen, CloseCountdown)):
            rest.append(decision)
        else:
            state.apply(decision)
    return rest


def test_a_crash_counts_down_and_its_restart_clears_the_error(tmp_path):
    clock = Clock()
    state = running(clock)
    run = link(state, tmp_path)
    run.heard_stderr("ZeroDivisionError: division by zero")
    decided = run.worker_exited(m.WorkerExit(code=1, reason="crashed", restart_in_s=5.0, attempt=1, max_restarts=3))
    [dialog] = fold(state, decided)
    assert isinstance(dialog, PushScreen) and isinstance(dialog.screen, CrashScreen)
    assert state.status == "error" and state.error == "worker exited with code 1: ZeroDivisionError: division by zero"
    assert log_entry_for(decided[0]).message == state.error  # and the Logs tab says so
    clock.now += 30
    assert state.elapsed() == 0.0  # the clock stops while nothing runs

    [close] = fold(state, run.hello())  # the restarted worker says hello
    assert isinstance(close, CloseCountdown)
    assert state.status == "restarting" and state.error == "" and state.ended_at is None
    assert state.phase_message == "restart 1: resuming from the latest checkpoint"
    assert run.hello() == []  # a later hello (no restart asked for) changes nothing


def test_a_mistake_offers_a_retry_and_the_retry_says_so(tmp_path):
    state = running(Clock())
    run = link(state, tmp_path)
    fatal = m.Error(message="reward.py line 3: NameError: name 'x' is not defined", fatal=True)
    state.apply(fatal)
    [dialog] = fold(state, run.worker_exited(m.WorkerExit(code=2, reason="mistake", retry=True)))
    assert isinstance(dialog.screen, MistakeScreen)
    assert state.status == "error" and state.error == fatal.message
    run._restart_pending = run.restarts  # what answering "retry" in the dialog asks for
    fold(state, run.hello())
    assert state.status == "restarting" and state.phase_message == "retrying" and state.fatal is None


def test_a_crash_that_is_not_restarted_says_why_and_how_to_leave(tmp_path):
    state = running(Clock())
    run = link(state, tmp_path)
    off = run.worker_exited(m.WorkerExit(code=1, reason="crashed", restart_on_crash=False, final=True))
    assert fold(state, off) == []  # no dialog
    assert state.error == "worker exited with code 1: crashed — restart_on_crash is off. Press q to quit."
    state = running(Clock())
    run = link(state, tmp_path)
    fold(state, run.worker_exited(m.WorkerExit(code=1, reason="crashed", attempt=3, max_restarts=3, final=True)))
    assert state.error.endswith("gave up after 3 restarts. Press q to quit.")


def test_a_nan_stop_is_not_restarted(tmp_path):
    state = running(Clock())
    run = link(state, tmp_path)
    state.apply(m.Error(message="stopped after 3 non-finite steps", fatal=True))
    fold(state, run.worker_exited(m.WorkerExit(code=3, reason="nan", final=True)))
    assert state.status == "error"
    assert state.error == "worker exited with code 3: stopped after 3 non-finite steps. Press q to quit."


def test_a_completed_run_that_exits_stays_done(tmp_path):
    state = running(Clock())
    run = link(state, tmp_path)
    state.apply(m.Complete(total_steps=3, seconds=4.0, status="completed"))
    [note] = run.worker_exited(m.WorkerExit(code=0, final=True))
    assert isinstance(note, DashboardNote) and log_entry_for(note).message == "worker exited (code 0)"
    assert state.apply(note) == set() and state.status == "done"


def test_a_refused_worker_is_the_runs_error_and_nothing_after_it_shows(tmp_path):
    state = running(Clock())
    run = link(state, tmp_path)
    refused = run.accept(m.Hello(protocol_version=99, worker_version="9", pid=1))
    assert isinstance(refused, RunFailed) and "protocol version 99" in refused.message
    state.apply(refused)
    assert state.status == "error" and state.error == refused.message
    assert run.worker_exited(m.WorkerExit(code=1, final=True)) == []  # the supervisor ends the run: no countdown


def test_the_dashboards_own_events_change_what_the_header_shows():
    clock = Clock()
    state = running(clock)
    assert state.apply(StopAsked()) == {"header", "bindings"}
    assert state.status == "stopping" and state.phase_message == "waiting for the final checkpoint"
    state.apply(m.Paused(step=3))
    assert state.status == "stopping"  # a pause that comes while stopping does not hide it

    state = running(clock)
    state.apply(OpenedReadOnly())  # a history that never said complete: nothing runs
    assert state.status == "error" and state.phase_message == "the run is not running"
    done = running(clock)
    done.apply(m.Complete(total_steps=3, seconds=4.0, status="completed"))
    done.apply(OpenedReadOnly())
    assert done.status == "done"

    state = running(clock)
    state.apply(RunAge(600.0))  # attached to a run that began ten minutes ago
    assert state.elapsed() == 600.0
    state.apply(WorkerEnded("worker exited with code 1"))
    clock.now += 5
    assert state.elapsed() == 600.0

    state = running(clock)
    state.apply(RunFailed("cannot start the run: no such file"))
    assert state.status == "error" and state.error == "cannot start the run: no such file"
    assert log_entry_for(RunFailed("x")).level == "error"


def test_a_restart_after_a_stop_on_error_starts_clean(tmp_path):
    state = running(Clock())
    state.apply(m.Error(message="boom", fatal=True))
    state.apply(RestartBegan(attempt=2, retry=False))
    assert (state.status, state.error, state.fatal, state.complete) == ("restarting", "", None, None)
    assert state.phase == "loading" and state.phase_message == "restart 2: resuming from the latest checkpoint"
