"""The dashboard's link to its run: start the run's supervisor or attach to it, show how the worker
ended (the supervisor's countdown, a mistake's retry), and leave: stop the run, leave it going, or
detach.

``GrpoApp`` (tui/app.py) owns one ``RunLink`` (``app.run_link``) and hands it what it needs when it makes
it; the link draws through ``RunView``, the four things it asks of the app. The run itself belongs
to its supervisor (tui/supervisor.py; docs/architecture.md, "Processes").
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from functools import partial
from pathlib import Path
from typing import Protocol

from textual.app import App

from grpo_tui.common.blas import child_env
from grpo_tui.protocol import messages as m
from grpo_tui.protocol.config import Config
from grpo_tui.protocol.control import read_record, refusal
from grpo_tui.protocol.messages import Restart, WorkerExit
from grpo_tui.protocol.outcome import restartable
from grpo_tui.tui.connection import RunConnection
from grpo_tui.tui.ending import read_ending, run_exit_code
from grpo_tui.tui.launcher import RunLive, launch, supervisor_failure, wait_ready
from grpo_tui.tui.run_history import read_history
from grpo_tui.tui.run_messages import WorkerExited, WorkerOutput
from grpo_tui.tui.screens.confirm_quit import ConfirmQuitScreen
from grpo_tui.tui.screens.crash import CrashScreen, MistakeScreen
from grpo_tui.tui.state import LogEntry, RunState
from grpo_tui.tui.views import Part

LIVE = ("starting", "running", "paused", "stopping", "restarting")  # the dashboard's statuses of a run that goes on


class RunView(Protocol):
    """What the link asks of the dashboard that owns it."""

    def fail(self, message: str) -> None:
        """Show ``message`` as the run's error: the header, the logs, a notification."""
        ...

    def fold(self, items: list[WorkerOutput]) -> None:
        """Fold ``items``, after every frame still waiting for the timer, into the state; draw now."""
        ...

    def redraw(self, dirty: set[Part]) -> None:
        """Refresh these parts of the screen from the state."""
        ...

    def add_logs(self, entries: list[LogEntry]) -> None: ...


class RunLink:
    """One dashboard's connection to one run, and what it decides about it: ``app`` for Textual's
    dialogs and exit, ``view`` to draw, ``state`` the run's state the app folds frames into."""

    def __init__(
        self,
        app: App[int],
        view: RunView,
        state: RunState,
        config: Config,
        *,
        config_path: str,
        worker_argv: list[str],
        run_dir: str,
        launch: bool,
        stop_timeout_s: float,
    ) -> None:
        self.app, self.view, self.state, self.config = app, view, state, config
        self.config_path, self.worker_argv, self.run_dir = config_path, worker_argv, run_dir
        self.launch = launch  # start the run's supervisor (grpo-tui run), or attach to it
        self.stop_timeout_s = stop_timeout_s
        self.proc: RunConnection | None = None
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
        return self.proc is not None and self.proc.running

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
                return self.view.fail(str(exc))
            if not await wait_ready(out, supervisor):
                return self.view.fail(f"cannot start the run ({' '.join(self.worker_argv[:3])}…): {supervisor_failure(out)}")
        self.proc = RunConnection(out, self.app.post_message)
        try:
            await self.proc.start()
        except (OSError, ConnectionError, asyncio.TimeoutError):
            self.proc = None
            await self._open_finished(Path(out))
        if not self.launch and (record := read_record(out)) is not None:  # elapsed counts from the run's start
            end = self.state.ended_at if self.state.ended_at is not None else self.state.clock()
            self.state.started_at = end - ((record.updated_at if self.read_only else time.time()) - record.started_at)

    async def _open_finished(self, out: Path) -> None:
        """No run answers in ``out``: show its history from run.jsonl, read-only."""
        self.read_only = True
        items: list[WorkerOutput] = await asyncio.to_thread(read_history, out)
        if (record := read_record(out)) is not None and record.exit_code is not None:
            items.append(WorkerExited(WorkerExit(code=record.exit_code, reason=record.reason, final=True)))
        elif not items:
            self.view.fail(f"no run in {out}: no control socket and no run.jsonl")
            return
        self.view.fold(items)
        if self.state.status in LIVE:  # it never said complete: killed, or it lost its supervisor
            self.state.status, self.state.phase_message = "error", "the run is not running"
        self.app.notify("read-only: this run is over", timeout=5)
        self.view.redraw({"header", "bindings"})

    async def send(self, command: m.Command) -> None:
        if not self.proc or not await self.proc.send(command):
            self.app.notify("the worker is not running", severity="warning")

    # ------------------------------------------------------------ the worker's hello and exit

    def accept(self, hello: m.Event) -> bool:
        """The first event of a worker: False if it refuses this dashboard (shown as the run's error)."""
        if (reason := refusal(hello)) is None:
            return True
        self.refused = True  # the supervisor refuses it too (and ends the run)
        self.view.fail(reason)
        return False

    def hello(self) -> None:
        """A worker said hello: the restart or retry asked for has happened."""
        if self._restart_pending is None:
            return
        retry = self._restart_pending == self.restarts
        self.restarts, self._restart_pending = self._restart_pending or 0, None
        s = self.state
        s.status, s.complete, s.error, s.fatal, s.ended_at = "restarting", None, "", None, None
        s.phase, s.phase_message = "loading", "retrying" if retry else f"restart {self.restarts}: resuming from the latest checkpoint"
        screen = self.app.screen
        if isinstance(screen, (CrashScreen, MistakeScreen)):  # answered here, by the countdown or another viewer
            screen.dismiss(None)
        self.view.redraw({"header", "bindings"})

    def worker_exited(self, exited: WorkerExit) -> None:
        """The supervisor decides about restarts (tui/supervisor.py); the dashboard shows its countdown,
        or a mistake's sentence with a retry (``ending``)."""
        s, code = self.state, exited.code
        self.worker_code = code
        if self.quitting or self.refused:
            return
        if s.complete is not None and exited.final:
            self.view.add_logs([LogEntry("info", f"worker exited (code {code})", "dashboard")])
            return
        stderr = list(self.stderr_tail) or [exited.reason]
        end = read_ending(code, s.fatal, stderr, s.output_dir or self.run_dir)
        s.status, s.ended_at, s.error = "error", s.clock(), end.error
        self.view.add_logs([LogEntry("error", s.error, "dashboard")])
        if exited.retry:
            self.app.push_screen(MistakeScreen(s.error, end.log_path), partial(self._after_countdown, retry=True))
        elif exited.restart_in_s is not None:
            self._restart_pending = exited.attempt
            screen = CrashScreen(code, exited.attempt, exited.max_restarts, exited.restart_in_s, s.clock,
                                 end.reason or exited.reason, end.log_path)
            self.app.push_screen(screen, self._after_countdown)
        elif not restartable(code):
            self.view.fail(f"{s.error}. Press q to quit.")
        else:
            why = "restart_on_crash is off" if not exited.restart_on_crash else (
                f"gave up after {exited.attempt} restarts" if exited.attempt >= exited.max_restarts else "restart cancelled")
            self.view.fail(f"{s.error} — {why}. Press q to quit.")
        self.view.redraw({"header", "bindings"})

    async def _after_countdown(self, restart: bool | None, retry: bool = False) -> None:
        """True: restart now (the countdown ran out), or retry after a mistake; False: cancel (the run
        ends); None: it restarted already."""
        if restart is None or self.quitting:
            return
        if retry and restart:
            self._restart_pending = self.restarts
        if self.proc is None or not await self.proc.send(Restart(now=restart)):
            self.app.notify("the run is gone", severity="warning")
        elif not restart:
            self.app.notify("the run ends; press q to quit", severity="warning")

    # ------------------------------------------------------------ leaving

    async def quit(self) -> None:
        """q: while the run goes on, ask: stop it, leave it running, or cancel. q again while stopping: kill now."""
        if self.quitting:
            self.app.notify("killing the worker")
            if self.proc:
                self.proc.kill()
            return
        if self.running and self.state.status in LIVE:
            def answered(choice: str | None) -> None:
                if choice == "stop":
                    self.stop_and_exit()
                elif choice == "leave":
                    self.app.call_later(self.detach)

            self.app.push_screen(ConfirmQuitScreen(), answered)
            return
        self.quitting = True
        if self.proc:
            await self.proc.close()
        self.app.exit(self.exit_code())

    async def detach(self) -> None:
        """d: leave the run going and close this dashboard (``grpo-tui attach`` comes back to it)."""
        self.quitting = self.detached = self.running
        if self.proc:
            await self.proc.close()
        self.app.exit(0)

    def stop_and_exit(self) -> None:
        """Stop the run (its final checkpoint), then close the dashboard: in the background, so that
        the dashboard keeps drawing the run's last frames and a second q can kill it."""
        self.app.run_worker(self._stop_and_exit(), name="stop_and_exit", group="stop", exclusive=True)

    async def _stop_and_exit(self) -> None:
        self.quitting = True
        self.state.status, self.state.phase_message = "stopping", "waiting for the final checkpoint"
        self.view.redraw({"header", "bindings"})
        assert self.proc is not None
        await self.proc.send(m.Stop())
        if not await self.proc.wait(self.stop_timeout_s):
            self.view.add_logs([LogEntry("warning", f"the worker did not stop within {self.stop_timeout_s:g} s; killing it", "dashboard")])
            self.proc.kill()
            await self.proc.wait(5.0)
        with contextlib.suppress(asyncio.TimeoutError):  # its last frames (the final checkpoint) first
            await asyncio.wait_for(self.worker_gone.wait(), 10.0)
        self.view.fold([])  # what is still waiting for the timer
        self.app.exit(self.exit_code())

    async def close(self) -> None:
        """The dashboard is closing: the run is the supervisor's, leaving the dashboard never stops it."""
        if self.proc:
            await self.proc.close()
