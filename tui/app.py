"""The dashboard: a viewer of a run. Folds its frames into ``RunState``, steers it from the keyboard.

The run belongs to its supervisor (tui/supervisor.py), which owns the worker and its restarts; the
dashboard starts one (``grpo-tui run``) or attaches to one (``grpo-tui attach``) and talks to it over
the control socket (tui/connection.py). Leaving the dashboard leaves the run going. The run's output
arrives in batches of typed items (``WorkerFrames`` of ``WorkerEvent`` and friends, tui/worker_proc.py)
that are buffered in order; a timer flushes the buffer a few times a second, folding every event
into the state and refreshing each changed widget once (docs/architecture.md, "Dashboard"). The
keys and the command palette live in tui/actions.py.
"""

from __future__ import annotations

import asyncio
import gc
import shlex
import subprocess
import sys
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import assert_never

from textual import work
from textual.app import ComposeResult
from textual.css.query import NoMatches
from textual.containers import Grid, Horizontal, Vertical
from textual.message import Message
from textual.timer import Timer
from textual.widget import Widget
from textual.widgets import Static, TabbedContent, TabPane

from grpo_tui.protocol import messages as m
from grpo_tui.protocol.config import Config
from grpo_tui.tui.checkpoints import CheckpointInfo, describe_checkpoints
from grpo_tui.protocol.control import refusal
from grpo_tui.tui.connection import RunConnection
from grpo_tui.tui.format import eval_note
from grpo_tui.tui.inert import clean
from grpo_tui.tui.run_control import RunControl
from grpo_tui.tui.screens.dashboard import DashboardScreen
from grpo_tui.tui.series import HISTORY_LIMIT
from grpo_tui.tui.state import METRICS, ZERO_STD_NOTE, LogEntry, RunState, log_entry_for
from grpo_tui.tui.views import VIEW_TITLES, VIEWS, Part, View
from grpo_tui.tui.widgets.config_panel import ConfigPanel
from grpo_tui.tui.widgets.key_bar import KeyBar
from grpo_tui.tui.widgets.logs_panel import LogsPanel
from grpo_tui.tui.widgets.metric_tile import MetricTile
from grpo_tui.tui.widgets.progress_panel import ProgressPanel
from grpo_tui.tui.widgets.reward_chart import RewardChart
from grpo_tui.tui.widgets.run_header import RunHeader
from grpo_tui.tui.widgets.samples_panel import SamplesPanel
from grpo_tui.tui.widgets.stats_panel import StatsPanel
from grpo_tui.tui.worker_proc import (
    WorkerBadLine,
    WorkerEvent,
    WorkerExited,
    WorkerFrames,
    WorkerHistory,
    WorkerOutput,
    WorkerStderr,
)

# Frames are folded and widgets redrawn once a second (with the header's clock), however fast the
# worker sends: a widget redraws at most that often, and a dashboard's work per second does not grow
# with the step rate. Drawing is most of a viewer's cost, and several viewers share the machine with
# training. What answers a key (paused, resumed, the sample display, an exit) is drawn at once.
FLUSH_INTERVAL_S = 1.0
PROMPT_S = 0.05  # how soon an answer to a key is drawn
LAZY_TABS: tuple[View, ...] = ("database", "charts")  # made when first shown (``GrpoApp.tab_widgets``)


def _answers_a_key(item: WorkerOutput) -> bool:
    """Frames a person waits for after a key: drawn at once, not at the next second."""
    if isinstance(item, WorkerEvent):
        return isinstance(item.event, (m.Paused, m.Resumed, m.SampleDisplayChanged, m.Complete, m.Checkpoint)) or (
            isinstance(item.event, m.Error))
    return isinstance(item, WorkerExited)


class CheckpointsScanned(Message):
    def __init__(self, infos: list[CheckpointInfo]) -> None:
        super().__init__()
        self.infos = infos


class GrpoApp(RunControl):
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
        run_dir: str | None = None,
        launch: bool = True,
        clock: Callable[[], float] = time.monotonic,
        stop_timeout_s: float = 120.0,
        flush_interval_s: float = FLUSH_INTERVAL_S,
    ) -> None:
        super().__init__()
        self.config_path, self.config = config_path, config
        self.worker_argv = list(worker_argv or [sys.executable, "-m", "grpo_tui.worker", config_path])
        self.stop_timeout_s, self.flush_interval_s = stop_timeout_s, flush_interval_s
        self.state = RunState(clock=clock, run_name=config.run_name)
        self._banner_note: str | None = ZERO_STD_NOTE
        self.run_dir = str(Path(run_dir or config.checkpoint.output_dir).resolve())
        self.launch = launch  # start the run's supervisor (grpo-tui run), or attach to it
        self.supervisor: subprocess.Popen[bytes] | None = None
        self.proc: RunConnection | None = None
        self.read_only = False  # a finished run: its history, no run to steer
        self.detached = False
        self.restarts = 0
        self.worker_code: int | None = None  # the last worker's exit code
        self._restart_pending: int | None = None  # a restart (its attempt) or a retry asked for, until its worker says hello
        self.quitting = False
        self._refused = False
        self._greeted = False
        self._pending: list[WorkerOutput] = []
        self._prompt: Timer | None = None  # a flush soon: an answer to a key came
        self._worker_gone = asyncio.Event()
        self._stderr_tail: deque[str] = deque(maxlen=20)
        self._footer_status = ""
        self._last_tab: View | None = VIEWS[0]
        # No animations: the tab underline's slide alone repainted the tab bar ~10 times per switch.
        self.animation_level = "none"

    @property
    def display_mode(self) -> m.SampleDisplay:
        """The run's sample display: what its worker says it uses (any viewer's ``m`` changes it for
        all), or the config's until the worker has said."""
        return self.state.sample_display or self.config.display.sample_display

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
                for i, (view, make) in enumerate(self.tab_widgets().items()):
                    with TabPane(f"{i + 1} {VIEW_TITLES[view]}", id=view):
                        if view not in LAZY_TABS:
                            yield make(self)
        yield KeyBar(id="keys")

    @staticmethod
    def tab_widgets() -> dict[View, Callable[[GrpoApp], Widget]]:
        """How to make the main widget of each tab, in tab order. The Database and Charts tabs
        (``LAZY_TABS``) are made, and their modules imported, when first shown: until then a
        dashboard pays nothing for them, at start or while frames come."""

        def database(app: GrpoApp) -> Widget:
            from grpo_tui.tui.widgets.database_view import DatabaseView

            store = app.state.database
            return DatabaseView(store.path if store else None, store.run_id if store else None, id="database-view")

        def charts(app: GrpoApp) -> Widget:
            from grpo_tui.tui.widgets.charts_view import ChartsView

            view = ChartsView(app.state.book, app.state.spread, id="charts-view")
            view.settings.change(smoothing=app.query_one(RewardChart).smoothing)  # one EMA for both
            return view

        return {
            "samples": lambda app: SamplesPanel(id="samples-panel"),
            "logs": lambda app: LogsPanel(id="logs-panel"),
            "config": lambda app: ConfigPanel(id="config-panel"),
            "database": database,
            "charts": charts,
        }

    async def make_lazy_tab(self, view: View | None) -> None:
        """Mount a lazy tab's widget the first time the tab is shown (tui/actions.py calls it)."""
        if view in LAZY_TABS and not (pane := self.query_one(f"TabPane#{view}", TabPane)).children:
            await pane.mount(self.tab_widgets()[view](self))

    async def on_mount(self) -> None:
        self.query_one("#zero-std").display = False
        self._render({"header", "metrics", "progress", "stats", "samples"})
        self.query_one("#config-panel", ConfigPanel).show_config(self.config.to_dict())
        self.set_interval(self.flush_interval_s, self._on_timer)
        self.call_after_refresh(self._freeze_startup_objects)
        await self._connect()

    @staticmethod
    def _freeze_startup_objects() -> None:
        """What exists once the screen is drawn (Textual, the widgets, their styles) lives as long as
        the app: frozen out of the collector, a full collection walks only what came after
        (bench/tui_load.py measures the collector's share)."""
        gc.freeze()

    # ------------------------------------------------------------ worker process

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
        self._refused = True  # the supervisor refuses it too (and ends the run)
        self._fail(reason)
        return False

    # ------------------------------------------------------------ the flush loop

    def on_worker_frames(self, message: WorkerFrames) -> None:
        """Live frames wait for the next flush (once a second, however fast they come); an answer
        to a key is drawn at once."""
        self._pending.extend(message.items)
        if any(isinstance(item, WorkerExited) and item.exit.final for item in message.items):
            self._worker_gone.set()
        if self._prompt is None and any(_answers_a_key(item) for item in message.items):
            self._prompt = self.set_timer(PROMPT_S, self._prompt_flush)

    def _prompt_flush(self) -> None:
        self._prompt = None
        self._on_timer(clock=False)

    def on_worker_history(self, message: WorkerHistory) -> None:  # before we connected: folded and drawn at once
        self._pending.extend(message.items)
        self._on_timer()

    def _on_timer(self, clock: bool = True) -> None:
        try:
            self.flush(always={"header"} if clock else set())  # the header's elapsed time and ETA tick
        except NoMatches:  # a tick that lands while the app is tearing down its widgets
            pass

    def flush(self, always: set[Part] | None = None) -> None:
        """Fold every buffered frame into the state, then refresh each changed view (and ``always``) once."""
        if not self._pending:
            if always:
                self._render(always)
            return
        batch, self._pending = self._pending, []
        dirty: set[Part] = set(always or ())
        logs: list[LogEntry] = []
        steps = [i for i, item in enumerate(batch) if isinstance(item, WorkerEvent) and isinstance(item.event, m.Step)]
        charted = steps[-HISTORY_LIMIT] if len(steps) > HISTORY_LIMIT else 0  # older steps would leave the charts
        for i, item in enumerate(batch):
            match item:
                case WorkerEvent(event=m.Step() as event) if i < charted and self._greeted:
                    self.state.count_step(event)
                case WorkerEvent(event=event):
                    if isinstance(event, m.Hello) and self._restart_pending is not None:
                        self._restarted()
                    if self._refused or (not self._greeted and not self._check_hello(event)):
                        continue
                    dirty |= self.state.apply(event)
                    if entry := log_entry_for(event):
                        logs.append(entry)
                case WorkerStderr(line=line):
                    self._stderr_tail.append(line)
                    level = "error" if "Traceback" in line or "Error" in line else "info"
                    logs.append(LogEntry(level, line, "stderr"))
                case WorkerBadLine(text=text):
                    logs.append(LogEntry("warning", text, "dashboard"))
                case WorkerExited():
                    self._add_logs(logs)
                    logs = []
                    self._render(dirty)
                    dirty = set()
                    self._greeted = False  # a restarted worker says hello again
                    self._worker_exited(item.exit)
                case _:
                    assert_never(item)
        self._add_logs(logs)
        self._render(dirty)

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
            evals = s.eval_curves()
            self.query_one(RewardChart).show(list(s.history_steps), s.series("reward"), s.series("loss"), evals)
            for tile in self.query("#tile-eval").results(MetricTile):
                tile.show(evals[0][2], eval_note(s.evals))
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
            for view in self.query("#database-view"):  # none until the tab is first shown (it reads the store then)
                view.set_store(s.database.path, s.database.run_id)  # type: ignore[attr-defined]
        if "bindings" in dirty or s.status != self._footer_status:
            self._footer_status = s.status  # the footer is rebuilt on refresh: only when keys change
            self.refresh_bindings()

    @work(thread=True, exclusive=True, group="scan")
    def scan_checkpoints(self) -> None:
        kinds = {c.path: c.kind for c in self.state.checkpoints}
        folder = self.state.output_dir or self.config.checkpoint.output_dir
        self.post_message(CheckpointsScanned(describe_checkpoints(folder, kinds)))

    def on_checkpoints_scanned(self, message: CheckpointsScanned) -> None:
        for panel in self.query(ConfigPanel):  # none while the app tears down
            panel.show_checkpoints(message.infos)



def run_dashboard(
    config_path: str, config: Config, worker_args: Sequence[str] = (), *, attach_dir: str | None = None
) -> int:
    """``grpo-tui run`` (starts the run) or, with ``attach_dir``, ``grpo-tui attach``: returns the exit
    code. ``worker_args``: extra worker flags (--ranks)."""
    path = str(Path(config_path))
    app = GrpoApp(
        path, config, worker_argv=[sys.executable, "-m", "grpo_tui.worker", path, *worker_args],
        run_dir=attach_dir, launch=attach_dir is None,
    )
    code = app.run()
    if app.detached or (app.proc is not None and app.proc.running and not app.quitting):
        print(f"The run goes on in {app.run_dir}.\nAttach again: grpo-tui attach {shlex.quote(app.run_dir)}")
    return int(code or 0)
