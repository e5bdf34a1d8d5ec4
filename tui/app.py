"""The dashboard: starts the worker, folds its frames into ``RunState``, steers it from the keyboard.

The worker's output arrives as typed messages (``WorkerEvent`` and friends, tui/worker_proc.py)
that are buffered in order; a timer flushes the buffer a few times a second, folding every event
into the state and refreshing each changed widget once (docs/architecture.md, "Dashboard"). The
keys and the command palette live in tui/actions.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import sys
import time
from collections import deque
from functools import partial
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import assert_never

from textual import work
from textual.app import ComposeResult
from textual.css.query import NoMatches
from textual.containers import Grid, Horizontal, Vertical
from textual.message import Message
from textual.widget import Widget
from textual.widgets import Static, TabbedContent, TabPane

from grpo_tui.protocol import messages as m
from grpo_tui.protocol.blas import child_env
from grpo_tui.protocol.config import Config
from grpo_tui.protocol.outcome import restartable
from grpo_tui.tui.actions import DashboardKeys
from grpo_tui.tui.checkpoints import CheckpointInfo, list_checkpoints
from grpo_tui.tui.ending import read_ending, run_exit_code
from grpo_tui.tui.format import eval_note
from grpo_tui.tui.inert import clean
from grpo_tui.tui.screens.confirm_quit import ConfirmQuitScreen
from grpo_tui.tui.screens.crash import CrashScreen, MistakeScreen
from grpo_tui.tui.screens.dashboard import DashboardScreen
from grpo_tui.tui.state import METRICS, ZERO_STD_NOTE, LogEntry, RunState, log_entry_for, refusal
from grpo_tui.tui.views import VIEW_TITLES, VIEWS, Part, View
from grpo_tui.tui.widgets.charts_view import ChartsView
from grpo_tui.tui.widgets.config_panel import ConfigPanel
from grpo_tui.tui.widgets.database_view import DatabaseView
from grpo_tui.tui.widgets.key_bar import KeyBar
from grpo_tui.tui.widgets.logs_panel import LogsPanel
from grpo_tui.tui.widgets.metric_tile import MetricTile
from grpo_tui.tui.widgets.progress_panel import ProgressPanel
from grpo_tui.tui.widgets.reward_chart import RewardChart
from grpo_tui.tui.widgets.run_header import RunHeader
from grpo_tui.tui.widgets.samples_panel import SamplesPanel
from grpo_tui.tui.widgets.stats_panel import StatsPanel
from grpo_tui.tui.worker_proc import (
    RESUME_LATEST,
    WorkerBadLine,
    WorkerEvent,
    WorkerExited,
    WorkerOutput,
    WorkerProcess,
    WorkerStderr,
)

# Frames are folded and widgets redrawn twice a second, however fast the worker sends: a widget
# redraws at most that often, and the dashboard's work per second does not grow with the step rate.
FLUSH_INTERVAL_S = 0.5


class CheckpointsScanned(Message):
    def __init__(self, infos: list[CheckpointInfo]) -> None:
        super().__init__()
        self.infos = infos


class GrpoApp(DashboardKeys):
    CSS_PATH = "app.tcss"
    TITLE = "grpo-tui"
    # the screen's width class picks the layout in app.tcss: tabs below the metrics when narrow
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (101, "-medium"), (160, "-wide")]
    VERTICAL_BREAKPOINTS = [(0, "-short"), (31, "-tall")]
    # a maximized tab keeps the run header and the keys
    ALLOW_IN_MAXIMIZED_VIEW = "#header, KeyBar"

    def __init__(
        self,
        config_path: str,
        config: Config,
        *,
        worker_argv: Sequence[str] | None = None,
        clock: Callable[[], float] = time.monotonic,
        stop_timeout_s: float = 120.0,
        flush_interval_s: float = FLUSH_INTERVAL_S,
    ) -> None:
        super().__init__()
        self.config_path, self.config = config_path, config
        self.worker_argv = list(worker_argv or [sys.executable, "-m", "grpo_tui.worker", config_path])
        self.stop_timeout_s, self.flush_interval_s = stop_timeout_s, flush_interval_s
        self.state = RunState(clock=clock, run_name=config.run_name)
        self.display_mode = config.display.sample_display
        self._banner_note: str | None = ZERO_STD_NOTE
        self.proc: WorkerProcess | None = None
        self.restarts = 0
        self.worker_code: int | None = None  # the last worker's exit code
        self.quitting = False
        self._refused = False
        self._greeted = False
        self._pending: list[WorkerOutput] = []
        self._worker_gone = asyncio.Event()
        self._stderr_tail: deque[str] = deque(maxlen=20)
        self._footer_status = ""
        self._last_tab: View | None = VIEWS[0]
        # No animations: the tab underline's slide alone repainted the tab bar ~10 times per switch.
        self.animation_level = "none"

    # ------------------------------------------------------------ layout

    def get_default_screen(self) -> DashboardScreen:
        return DashboardScreen(id="_default")

    def compose(self) -> ComposeResult:
        yield RunHeader(id="header")
        with Horizontal(id="body"):
            with Vertical(id="left"):
                yield Static(ZERO_STD_NOTE, id="zero-std")
                with Grid(id="tiles", classes="with-eval" if self.config.eval is not None else ""):
                    for key, title in METRICS:
                        yield MetricTile(key, title)
                    if self.config.eval is not None:
                        yield MetricTile("eval", "eval")
                yield RewardChart(id="chart")
                yield ProgressPanel(id="progress")
                yield StatsPanel(id="stats")
            with TabbedContent(id="tabs", initial=VIEWS[0]):
                for i, (view, widget) in enumerate(self.tab_widgets(self.state).items()):
                    with TabPane(f"{i + 1} {VIEW_TITLES[view]}", id=view):
                        yield widget
        yield KeyBar(id="keys")

    @staticmethod
    def tab_widgets(state: RunState | None = None) -> dict[View, Widget]:
        """The main widget of each tab, in tab order (the Charts tab draws from ``state``'s books)."""
        return {
            "samples": SamplesPanel(id="samples-panel"),
            "logs": LogsPanel(id="logs-panel"),
            "config": ConfigPanel(id="config-panel"),
            "database": DatabaseView(id="database-view"),
            "charts": ChartsView(state.book if state else None, state.spread if state else None, id="charts-view"),
        }

    async def on_mount(self) -> None:
        self.query_one("#zero-std").display = False
        self._render({"header", "metrics", "progress", "stats", "samples"})
        self.query_one("#config-panel", ConfigPanel).show_config(self.config.to_dict())
        self.set_interval(self.flush_interval_s, self._on_timer)
        self.set_interval(1.0, lambda: self._on_timer({"header"}))
        self.call_after_refresh(self._freeze_startup_objects)
        await self._spawn()

    @staticmethod
    def _freeze_startup_objects() -> None:
        """What exists once the screen is drawn (Textual, the widgets, their styles) lives as long as
        the app: frozen out of the collector, a full collection walks only what came after (in
        bench/tui_load.py the collector's full passes took 1.7 s of CPU in 30 s, 0.7 s frozen)."""
        gc.freeze()

    # ------------------------------------------------------------ worker process

    async def _spawn(self, *, resume_latest: bool = False) -> None:
        """Start the worker; a restart adds ``--resume latest``, whatever the config says."""
        self._greeted = False
        self._worker_gone = asyncio.Event()  # set once its WorkerExited (after its last frame) is buffered
        argv = self.worker_argv + (list(RESUME_LATEST) if resume_latest else [])
        # Preload the fast BLAS here so the worker need not re-execute itself to get it.
        self.proc = WorkerProcess(argv, env=child_env(self.config.runtime.blas), post=self.post_message)
        try:
            await self.proc.start()
        except OSError as exc:
            self._fail(f"cannot start the worker ({' '.join(self.worker_argv[:3])}…): {exc}")

    def _fail(self, message: str) -> None:
        self.state.status, self.state.error = "error", message
        self.state.ended_at = self.state.clock()
        self._add_logs([LogEntry("error", message, "dashboard")])
        self.notify(clean(message, single_line=True), severity="error", timeout=10, markup=False)  # may quote stderr
        self._render({"header", "bindings"})

    def _check_hello(self, event: m.Event) -> bool:
        self._greeted = True
        if (reason := refusal(event)) is None:
            return True
        self._refused = True
        if self.proc:
            self.proc.kill()
        self._fail(reason)
        return False

    # ------------------------------------------------------------ the flush loop

    def on_worker_event(self, message: WorkerEvent) -> None:
        self._pending.append(message)

    def on_worker_stderr(self, message: WorkerStderr) -> None:
        self._pending.append(message)

    def on_worker_bad_line(self, message: WorkerBadLine) -> None:
        self._pending.append(message)

    def on_worker_exited(self, message: WorkerExited) -> None:
        self._pending.append(message)
        self._worker_gone.set()

    def _on_timer(self, dirty: set[Part] | None = None) -> None:
        try:
            self._render(dirty) if dirty else self.flush()
        except NoMatches:  # a tick that lands while the app is tearing down its widgets
            pass

    def flush(self) -> None:
        """Fold every buffered frame into the state, then refresh each changed view once."""
        if not self._pending:
            return
        batch, self._pending = self._pending, []
        dirty: set[Part] = set()
        logs: list[LogEntry] = []
        for item in batch:
            match item:
                case WorkerEvent(event=event):
                    if self._refused or (not self._greeted and not self._check_hello(event)):
                        continue
                    dirty |= self.state.apply(event)
                    self._keep_display(event)
                    if entry := log_entry_for(event):
                        logs.append(entry)
                case WorkerStderr(line=line):
                    self._stderr_tail.append(line)
                    level = "error" if "Traceback" in line or "Error" in line else "info"
                    logs.append(LogEntry(level, line, "stderr"))
                case WorkerBadLine(text=text):
                    logs.append(LogEntry("warning", text, "dashboard"))
                case WorkerExited(code=code):
                    self._add_logs(logs)
                    logs = []
                    self._render(dirty)
                    dirty = set()
                    self._worker_exited(code)
                case _:
                    assert_never(item)
        self._add_logs(logs)
        self._render(dirty)

    def _keep_display(self, event: m.Event) -> None:
        """A worker that starts (a crash restart: it read the config's mode) with another sample
        display than the one on screen is told the dashboard's again."""
        if isinstance(event, m.Init) and event.sample_display not in (None, self.display_mode):
            self.run_worker(self._send(m.SetSampleDisplay(mode=self.display_mode)), group="display", exclusive=True)

    def _add_logs(self, entries: list[LogEntry]) -> None:
        if entries:
            self.query_one("#logs-panel", LogsPanel).add(entries)

    def _render(self, dirty: Iterable[Part]) -> None:
        dirty, s = set(dirty), self.state
        if "header" in dirty:
            self.query_one(RunHeader).show(s)
        if "metrics" in dirty:
            for key, _ in METRICS:
                note = "(no signal)" if key == "loss" and s.zero_std else ""
                self.query_one(f"#tile-{key}", MetricTile).show(s.history[key], note)
            evals = s.eval_series()
            self.query_one(RewardChart).show(list(s.history_steps), s.series("reward"), s.series("loss"), evals)
            for tile in self.query("#tile-eval").results(MetricTile):
                tile.show(evals[2], eval_note(s.evals))
            banner = self.query_one("#zero-std", Static)
            said = s.no_signal_note
            if said is not None and said != self._banner_note:
                banner.update(said)
                self._banner_note = said
            if banner.display != (said is not None):
                banner.display = said is not None
        if "progress" in dirty:
            self.query_one(ProgressPanel).show(s)
        if "stats" in dirty:
            self.query_one(StatsPanel).show(s)
        if "samples" in dirty:
            self.query_one(SamplesPanel).show(s.samples, self.display_mode)
        if "config" in dirty and s.config:
            self.query_one(ConfigPanel).show_config(s.config)
        if "config" in dirty or "checkpoints" in dirty:
            self.scan_checkpoints()
        if "database" in dirty and s.database:
            self.query_one("#database-view", DatabaseView).set_store(s.database.path, s.database.run_id)
        if "bindings" in dirty or s.status != self._footer_status:
            self._footer_status = s.status  # the footer is rebuilt on refresh: only when keys change
            self.refresh_bindings()

    @work(thread=True, exclusive=True, group="scan")
    def scan_checkpoints(self) -> None:
        kinds = {c.path: c.kind for c in self.state.checkpoints}
        folder = self.state.output_dir or self.config.checkpoint.output_dir
        self.post_message(CheckpointsScanned(list_checkpoints(folder, kinds)))

    def on_checkpoints_scanned(self, message: CheckpointsScanned) -> None:
        for panel in self.query(ConfigPanel):  # none while the app tears down
            panel.show_checkpoints(message.infos)

    # ------------------------------------------------------------ crashes and restarts

    def _worker_exited(self, code: int) -> None:
        """Only a crash is restarted (``outcome.restartable``); a mistake offers a retry (``ending``)."""
        s = self.state
        self.worker_code = code
        if self.quitting or self._refused:
            return
        if s.complete is not None:
            self._add_logs([LogEntry("info", f"worker exited (code {code})", "dashboard")])
            return
        end = read_ending(code, s.fatal, self._stderr_tail, s.output_dir or self.config.checkpoint.output_dir)
        s.status, s.ended_at, s.error = "error", s.clock(), end.error
        self._add_logs([LogEntry("error", s.error, "dashboard")])
        display = self.config.display
        if end.mistake:
            self.push_screen(MistakeScreen(s.error, end.log_path), partial(self._after_countdown, retry=True))
        elif not restartable(code):
            self._fail(f"{s.error}. Press q to quit.")
        elif display.restart_on_crash and self.restarts < display.max_restarts:
            screen = CrashScreen(code, self.restarts + 1, display.max_restarts, display.restart_delay_s, s.clock,
                                 end.reason, end.log_path)
            self.push_screen(screen, self._after_countdown)
        else:
            why = f"gave up after {self.restarts} restarts" if display.restart_on_crash else "restart_on_crash is off"
            self._fail(f"{s.error} — {why}. Press q to quit.")
        self._render({"header", "bindings"})

    async def _after_countdown(self, restart: bool | None, retry: bool = False) -> None:
        """A crash's restart resumes from the latest checkpoint; a mistake's retry if this run saved one."""
        if not restart or self.quitting:
            self.notify("fix the mistake first; q quits" if retry else "restart cancelled; press q to quit", severity="warning")
            return
        self.restarts += 0 if retry else 1
        s = self.state
        s.status, s.complete, s.error, s.fatal, s.ended_at = "restarting", None, "", None, None
        s.phase, s.phase_message = "loading", "retrying" if retry else f"restart {self.restarts}: resuming from the latest checkpoint"
        self._render({"header", "bindings"})
        await self._spawn(resume_latest=not retry or bool(s.checkpoints))

    # ------------------------------------------------------------ quitting

    async def action_quit(self) -> None:
        """q: ask while training; then stop, wait for the final checkpoint, exit. q again: kill now."""
        if self.quitting:
            self.notify("killing the worker")
            if self.proc:
                self.proc.kill()
            return
        if self.proc and self.proc.running and self.state.status in ("running", "paused", "starting", "restarting"):
            def answered(yes: bool | None) -> None:
                if yes:
                    self.stop_and_exit()

            self.push_screen(ConfirmQuitScreen(), answered)
            return
        self.quitting = True
        if self.proc:
            await self.proc.shutdown(timeout=2.0)
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
        if self.proc:  # last resort (ctrl+c, an exception): never leave an orphan worker
            self.proc.kill()
            await self.proc.wait(2.0)  # reap it while the event loop still runs


def run_dashboard(config_path: str, config: Config, worker_args: Sequence[str] = ()) -> int:
    """``grpo-tui run``: returns the process exit code. ``worker_args``: extra worker flags (--ranks)."""
    path = str(Path(config_path))
    app = GrpoApp(path, config, worker_argv=[sys.executable, "-m", "grpo_tui.worker", path, *worker_args])
    try:
        code = app.run()
    finally:
        if app.proc:
            app.proc.kill()
    return int(code or 0)
