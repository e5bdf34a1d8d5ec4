"""The dashboard's side of a run: start its supervisor or attach to it, show how the worker ended
(the supervisor's countdown, a mistake's retry), and quit: stop the run, leave it, or detach.

``RunControl`` is the base of ``GrpoApp`` (tui/app.py), which owns the layout, the state and the flush
loop; the run itself belongs to its supervisor (tui/supervisor.py; docs/architecture.md, "Processes").
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import time
from collections import deque
from functools import partial
from pathlib import Path

from textual import work

from grpo_tui.protocol import messages as m
from grpo_tui.protocol.blas import child_env
from grpo_tui.protocol.control import Restart, WorkerExit, read_record
from grpo_tui.protocol.outcome import restartable
from grpo_tui.tui.actions import DashboardKeys
from grpo_tui.tui.connection import RunConnection, RunLive, launch, read_history, supervisor_failure, wait_ready_async
from grpo_tui.tui.ending import read_ending, run_exit_code
from grpo_tui.tui.screens.confirm_quit import ConfirmQuitScreen
from grpo_tui.tui.screens.crash import CrashScreen, MistakeScreen
from grpo_tui.tui.state import LogEntry
from grpo_tui.tui.views import Part
from grpo_tui.tui.worker_proc import WorkerExited, WorkerOutput


LIVE = ("starting", "running", "paused", "stopping", "restarting")  # the dashboard's statuses of a run that goes on


class RunControl(DashboardKeys):
    # Set by GrpoApp.__init__.
    config_path: str
    worker_argv: list[str]
    run_dir: str
    launch: bool
    supervisor: subprocess.Popen[bytes] | None
    read_only: bool
    restarts: int
    worker_code: int | None
    stop_timeout_s: float
    _restart_pending: int | None
    _refused: bool
    _pending: list[WorkerOutput]
    _worker_gone: asyncio.Event
    _stderr_tail: deque[str]

    def _fail(self, message: str) -> None:
        raise NotImplementedError

    def flush(self) -> None:
        raise NotImplementedError

    def _render(self, dirty: set[Part]) -> None:
        raise NotImplementedError

    def _add_logs(self, entries: list[LogEntry]) -> None:
        raise NotImplementedError

    async def _connect(self) -> None:
        """Start the run's supervisor (unless attaching), then connect; a finished run opens read-only."""
        out = self.run_dir
        if self.launch:
            try:
                # the fast BLAS preloaded for the worker, so it need not re-execute itself to get it
                self.supervisor = launch(
                    out, self.worker_argv, config_path=self.config_path, display=self.config.display,
                    env=child_env(self.config.runtime.blas), wait_viewer=10.0,
                )
            except (RunLive, OSError) as exc:
                return self._fail(str(exc))
            if not await wait_ready_async(out, self.supervisor):
                return self._fail(f"cannot start the run ({' '.join(self.worker_argv[:3])}…): {supervisor_failure(out)}")
        self.proc = RunConnection(out, self.post_message)
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
            self._fail(f"no run in {out}: no control socket and no run.jsonl")
            return
        self._pending.extend(items)
        self.flush()
        if self.state.status in LIVE:  # it never said complete: killed, or it lost its supervisor
            self.state.status, self.state.phase_message = "error", "the run is not running"
        self.notify("read-only: this run is over", timeout=5)
        self._render({"header", "bindings"})

    def _worker_exited(self, exited: WorkerExit) -> None:
        """The supervisor decides about restarts (tui/supervisor.py); the dashboard shows its countdown,
        or a mistake's sentence with a retry (``ending``)."""
        s, code = self.state, exited.code
        self.worker_code = code
        if self.quitting or self._refused:
            return
        if s.complete is not None and exited.final:
            self._add_logs([LogEntry("info", f"worker exited (code {code})", "dashboard")])
            return
        stderr = list(self._stderr_tail) or [exited.reason]
        end = read_ending(code, s.fatal, stderr, s.output_dir or self.run_dir)
        s.status, s.ended_at, s.error = "error", s.clock(), end.error
        self._add_logs([LogEntry("error", s.error, "dashboard")])
        if exited.retry:
            self.push_screen(MistakeScreen(s.error, end.log_path), partial(self._after_countdown, retry=True))
        elif exited.restart_in_s is not None:
            self._restart_pending = exited.attempt
            screen = CrashScreen(code, exited.attempt, exited.max_restarts, exited.restart_in_s, s.clock,
                                 end.reason or exited.reason, end.log_path)
            self.push_screen(screen, self._after_countdown)
        elif not restartable(code):
            self._fail(f"{s.error}. Press q to quit.")
        else:
            why = "restart_on_crash is off" if not exited.restart_on_crash else (
                f"gave up after {exited.attempt} restarts" if exited.attempt >= exited.max_restarts else "restart cancelled")
            self._fail(f"{s.error} — {why}. Press q to quit.")
        self._render({"header", "bindings"})

    async def _after_countdown(self, restart: bool | None, retry: bool = False) -> None:
        """True: restart now (the countdown ran out), or retry after a mistake; False: cancel (the run
        ends); None: it restarted already."""
        if restart is None or self.quitting:
            return
        if retry and restart:
            self._restart_pending = self.restarts
        if self.proc is None or not await self.proc.send(Restart(now=restart)):
            self.notify("the run is gone", severity="warning")
        elif not restart:
            self.notify("the run ends; press q to quit", severity="warning")

    def _restarted(self) -> None:
        retry = self._restart_pending == self.restarts
        self.restarts, self._restart_pending = self._restart_pending or 0, None
        s = self.state
        s.status, s.complete, s.error, s.fatal, s.ended_at = "restarting", None, "", None, None
        s.phase, s.phase_message = "loading", "retrying" if retry else f"restart {self.restarts}: resuming from the latest checkpoint"
        if isinstance(self.screen, (CrashScreen, MistakeScreen)):  # answered here, by the countdown or another viewer
            self.screen.dismiss(None)
        self._render({"header", "bindings"})

    async def action_quit(self) -> None:
        """q: while the run goes on, ask: stop it, leave it running, or cancel. q again while stopping: kill now."""
        if self.quitting:
            self.notify("killing the worker")
            if self.proc:
                self.proc.kill()
            return
        if self.proc and self.proc.running and self.state.status in LIVE:
            def answered(choice: str | None) -> None:
                if choice == "stop":
                    self.stop_and_exit()
                elif choice == "leave":
                    self.call_later(self.action_detach)

            self.push_screen(ConfirmQuitScreen(), answered)
            return
        self.quitting = True
        if self.proc:
            await self.proc.close()
        self.exit(run_exit_code(self.worker_code, self.state.status == "error"))

    @work(exclusive=True, group="stop")
    async def stop_and_exit(self) -> None:
        self.quitting = True
        self.state.status, self.state.phase_message = "stopping", "waiting for the final checkpoint"
        self._render({"header", "bindings"})
        assert self.proc is not None
        await self.proc.send(m.Stop())
        if not await self.proc.wait(self.stop_timeout_s):
            self._add_logs([LogEntry("warning", f"the worker did not stop within {self.stop_timeout_s:g} s; killing it", "dashboard")])
            self.proc.kill()
            await self.proc.wait(5.0)
        with contextlib.suppress(asyncio.TimeoutError):  # its last frames (the final checkpoint) first
            await asyncio.wait_for(self._worker_gone.wait(), 10.0)
        self.flush()
        self.exit(run_exit_code(self.worker_code, self.state.status == "error"))

    async def on_unmount(self) -> None:
        if self.proc:  # the run is the supervisor's: leaving the dashboard never stops it
            await self.proc.close()
