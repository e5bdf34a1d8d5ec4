"""The dashboard's link to its run: start the run's supervisor or attach to it, decide what the
dashboard shows of how the worker ended (the supervisor's countdown, a mistake's retry), and leave:
stop the run, leave it going, or detach.

``GrpoApp`` (tui/app.py) owns one ``RunLink`` (``app.run_link``) and hands it what it needs when it
makes it. The link never writes the dashboard's state: what it learns goes into the app's stream of
items as dashboard events (tui/run_events.py, through ``post``), beside the worker's frames, and
``RunState.apply`` folds them. A worker's hello and exit come to it as questions (``hello``,
``worker_exited``), and it answers with what to do: events to fold, a dialog to push, the countdown
to close. The run itself belongs to its supervisor (tui/supervisor.py; docs/architecture.md,
"Processes").
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Protocol, Union

from textual.screen import Screen

from grpo_tui.common.blas import child_env
from grpo_tui.protocol import messages as m
from grpo_tui.protocol.config import Config
from grpo_tui.protocol.control import LIVE_STATUSES, read_record, refusal
from grpo_tui.protocol.messages import Restart, WorkerExit
from grpo_tui.protocol.outcome import restartable
from grpo_tui.tui.connection import RunConnection
from grpo_tui.tui.ending import read_ending, run_exit_code
from grpo_tui.tui.launcher import RunLive, launch, supervisor_failure, wait_ready
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
from grpo_tui.tui.run_history import read_history
from grpo_tui.tui.run_messages import RunItem, WorkerExited, WorkerOutput
from grpo_tui.tui.process_state import process_state
from grpo_tui.tui.screens.confirm_quit import ConfirmQuitScreen
from grpo_tui.tui.screens.crash import CrashScreen, MistakeScreen
from grpo_tui.tui.state import RunState


@dataclass(frozen=True)
class PushScreen:
    """Show this dialog; ``answered`` gets its result."""

    screen: Screen[Any]
    answered: Callable[[Any], Any]


@dataclass(frozen=True)
class CloseCountdown:
    """The countdown or the mistake's dialog, if it is on screen, is answered already: close it."""


Decision = Union[DashboardEvent, PushScreen, CloseCountdown]  # what the link tells the app to do, in order


class RunHost(Protocol):
    """What the link asks of its dashboard: Textual's notifications, dialogs, workers and exit, and
    ``fold``, which puts items into the app's stream (folded and drawn at once)."""

    @property
    def notify(self) -> Callable[..., Any]: ...

    @property
    def post_message(self) -> Callable[..., Any]: ...

    @property
    def call_later(self) -> Callable[..., Any]: ...

    @property
    def push_screen(self) -> Callable[..., Any]: ...

    @property
    def exit(self) -> Callable[..., Any]: ...

    @property
    def run_worker(self) -> Callable[..., Any]: ...

    def fold(self, items: Sequence[RunItem]) -> None: ...


class RunLink:
    """One dashboard's connection to one run, and what it decides about it: ``app`` for Textual's
    dialogs, notifications and exit and its ``fold`` (``post`` here: items into the app's stream,
    folded and drawn at once), ``state`` the run's state as folded so far (read, never written here)."""

    def __init__(
        self,
        app: RunHost,
        state: RunState,
        config: Config,
        *,
        config_path: str,
        worker_argv: list[str],
        run_dir: str,
        launch: bool,
        stop_timeout_s: float,
    ) -> None:
        self.app, self.post, self.state, self.config = app, app.fold, state, config
        self.config_path, self.worker_argv, self.run_dir = config_path, worker_argv, run_dir
        self.launch = launch  # start the run's supervisor (grpo-tui run), or attach to it
        self.stop_timeout_s = stop_timeout_s
        self.connection: RunConnection | None = None
        self.read_only = False  # a finished run: its history, no run to steer
        self.quitting = False
        self.detached = False
        self.restarts = 0
        self.worker_code: int | None = None  # the last worker's exit code
        self.refused = False  # the worker's hello was refused (the supervisor ends the run too)
        self.worker_gone = asyncio.Event()  # its final exit has come
        self.stderr_tail: deque[str] = deque(maxlen=20)  # what a crash's reason is read from
        self._restart_pending: int | None = None  # a restart (its attempt) or a retry asked for, until its worker says hello

    @property
    def running(self) -> bool:
        """A run answers: there is something to steer, stop or leave going."""
        return self.connection is not None and self.connection.running

    def exit_code(self) -> int:
        return run_exit_code(self.worker_code, self.state.status == "error")

    # ------------------------------------------------------------ connecting

    async def connect(self) -> None:
        """Start the run's supervisor (unless attaching), then connect; a finished run opens read-only."""
        out = self.run_dir
        if self.launch:
            try:
                # the fast BLAS preloaded for the worker, so it need not re-execute itself to get it
                supervisor = launch(
                    out, self.worker_argv, config_path=self.config_path, display=self.config.display,
                    env=child_env(self.config.runtime.blas), wait_viewer=10.0,
                )
            except (RunLive, OSError) as exc:
                return self.post([RunFailed(str(exc))])
            if not await wait_ready(out, supervisor):
                return self.post([RunFailed(f"cannot start the run ({' '.join(self.worker_argv[:3])}…): {supervisor_failure(out)}")])
        self.connection = RunConnection(out, self.app.post_message)
        try:
            await self.connection.start()
        except (OSError, ConnectionError, asyncio.TimeoutError):
            self.connection = None
            await self._open_finished(Path(out))
        if not self.launch and (record := read_record(out)) is not None:  # elapsed counts from the run's start
            self.post([RunAge((record.updated_at if self.read_only else time.time()) - record.started_at)])

    async def _open_finished(self, out: Path) -> None:
        """No run answers in ``out``: show its history from run.jsonl, read-only."""
        self.read_only = True
        items: list[WorkerOutput] = await asyncio.to_thread(read_history, out)
        if (record := read_record(out)) is not None and record.exit_code is not None:
            items.append(WorkerExited(WorkerExit(code=record.exit_code, reason=record.reason, final=True)))
        elif not items:
            self.post([RunFailed(f"no run in {out}: no control socket and no run.jsonl")])
            return
        self.post([*items, OpenedReadOnly()])
        self.app.notify("read-only: this run is over", timeout=5)

    def silence(self) -> list[WorkerSilent]:
        """A running worker that has said nothing for longer than its steps take (the app's timer asks
        once a second), with what its process is doing."""
        quiet = self.state.quiet_for()
        if quiet is None or quiet < self.state.silence_after():
            return []
        return [WorkerSilent(quiet, process_state(self.connection.worker_pid if self.connection else 0))]

    async def send(self, command: m.Command) -> bool:
        if not self.connection or not await self.connection.send(command):
            self.app.notify("the worker is not running", severity="warning")
            return False
        return True

    # The run's keys, one path each: the command, then what the dashboard shows before the answer.

    async def pause(self) -> None:
        """p: the header says "pausing after this step…" at once, the worker's ``paused`` after."""
        if await self.send(m.Pause()):
            self.post([PauseAsked()])

    async def resume(self) -> None:
        """r: the worker's ``resumed`` answers."""
        await self.send(m.Resume())

    async def save(self) -> None:
        """s: the worker's ``checkpoint`` answers."""
        await self.send(m.SaveCheckpoint())

    async def show_samples(self, mode: m.SampleDisplay) -> None:
        """m: the worker answers with the display it uses, which every viewer shows."""
        await self.send(m.SetSampleDisplay(mode=mode))

    # ------------------------------------------------------------ the worker's hello and exit

    def accept(self, hello: m.Event) -> RunFailed | None:
        """The first event of a worker: the run's error if the worker refuses this dashboard."""
        if (reason := refusal(hello)) is None:
            return None
        self.refused = True  # the supervisor refuses it too (and ends the run)
        return RunFailed(reason)

    def heard_stderr(self, line: str) -> None:
        self.stderr_tail.append(line)

    def hello(self) -> list[Decision]:
        """A worker said hello: the restart or retry asked for, if one was, has happened."""
        if self._restart_pending is None:
            return []
        retry = self._restart_pending == self.restarts
        self.restarts, self._restart_pending = self._restart_pending or 0, None
        # the dialog was answered here, by the countdown or by another viewer
        return [RestartBegan(attempt=self.restarts, retry=retry), CloseCountdown()]

    def worker_exited(self, exited: WorkerExit) -> list[Decision]:
        """The supervisor decides about restarts (tui/supervisor.py); the dashboard shows its countdown,
        or a mistake's sentence with a retry (``ending``)."""
        s, code = self.state, exited.code
        self.worker_code = code
        if self.quitting or self.refused:
            return []
        if s.complete is not None and exited.final:
            return [DashboardNote("info", f"worker exited (code {code})")]
        stderr = list(self.stderr_tail) or [exited.reason]
        end = read_ending(code, s.fatal, stderr, s.output_dir or self.run_dir)
        ended: list[Decision] = [WorkerEnded(end.error)]
        if exited.retry:
            return [*ended, PushScreen(MistakeScreen(end.error, end.log_path), partial(self._after_countdown, retry=True))]
        if exited.restart_in_s is not None:
            self._restart_pending = exited.attempt
            screen = CrashScreen(code, exited.attempt, exited.max_restarts, exited.restart_in_s, s.clock,
                                 end.reason or exited.reason, end.log_path)
            return [*ended, PushScreen(screen, self._after_countdown)]
        if not restartable(code):
            return [*ended, RunFailed(f"{end.error}. Press q to quit.")]
        why = "restart_on_crash is off" if not exited.restart_on_crash else (
            f"gave up after {exited.attempt} restarts" if exited.attempt >= exited.max_restarts else "restart cancelled")
        return [*ended, RunFailed(f"{end.error} — {why}. Press q to quit.")]

    async def _after_countdown(self, restart: bool | None, retry: bool = False) -> None:
        """True: restart now (the countdown ran out), or retry after a mistake; False: cancel (the run
        ends); None: it restarted already."""
        if restart is None or self.quitting:
            return
        if retry and restart:
            self._restart_pending = self.restarts
        if self.connection is None or not await self.connection.send(Restart(now=restart)):
            self.app.notify("the run is gone", severity="warning")
        elif not restart:
            self.app.notify("the run ends; press q to quit", severity="warning")

    # ------------------------------------------------------------ leaving

    async def quit(self) -> None:
        """q: while the run goes on, ask: stop it, stop it and stay, leave it running, or cancel. q again while
        stopping: kill now."""
        if self.quitting:
            self.app.notify("killing the worker")
            if self.connection:
                self.connection.kill()
            return
        if self.running and self.state.status in LIVE_STATUSES:
            def answered(choice: str | None) -> None:
                if choice == "stop":
                    self.stop_and_exit()
                elif choice == "stay":
                    self.stop_and_stay()
                elif choice == "leave":
                    self.app.call_later(self.detach)

            self.app.push_screen(ConfirmQuitScreen(), answered)
            return
        self.quitting = True
        if self.connection:
            await self.connection.close()
        self.app.exit(self.exit_code())

    async def detach(self) -> None:
        """d: leave the run going and close this dashboard (``grpo-tui attach`` comes back to it)."""
        self.quitting = self.detached = self.running
        if self.connection:
            await self.connection.close()
        self.app.exit(0)

    def stop_and_exit(self) -> None:
        """Stop the run (its final checkpoint), then close the dashboard: in the background, so that
        the dashboard keeps drawing the run's last frames and a second q can kill it."""
        self.app.run_worker(self._stop_and_exit(), name="stop_and_exit", group="stop", exclusive=True)

    async def _stop_and_exit(self) -> None:
        self.quitting = True
        await self._stop()
        self.app.exit(self.exit_code())

    def stop_and_stay(self) -> None:
        """Stop the run as ``stop_and_exit`` does, and keep this dashboard open on the finished run
        (every tab, read-only; q closes it)."""
        self.app.run_worker(self._stop_and_stay(), name="stop_and_stay", group="stop", exclusive=True)

    async def _stop_and_stay(self) -> None:
        await self._stop()
        self.post([DashboardNote("info", "the run is stopped; this dashboard stays on it, read-only (q closes it)")])

    async def _stop(self) -> None:
        """Ask the run to stop and wait for its final checkpoint and last frames (a kill past the timeout)."""
        self.post([StopAsked()])
        assert self.connection is not None
        await self.connection.send(m.Stop())
        if not await self.connection.wait(self.stop_timeout_s):
            self.post([DashboardNote("warning", f"the worker did not stop within {self.stop_timeout_s:g} s; killing it")])
            self.connection.kill()
            await self.connection.wait(5.0)
        with contextlib.suppress(asyncio.TimeoutError):  # its last frames (the final checkpoint) first
            await asyncio.wait_for(self.worker_gone.wait(), 10.0)
        self.post([])  # what is still waiting for the timer

    async def close(self) -> None:
        """The dashboard is closing: the run is the supervisor's, leaving the dashboard never stops it."""
        if self.connection:
            await self.connection.close()
