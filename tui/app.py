"""The dashboard: a viewer of a run. Folds its frames into ``RunState``, steers it from the keyboard.

The run belongs to its supervisor (tui/supervisor.py), which owns the worker and its restarts; the
dashboard starts one (``grpo-tui run``) or attaches to one (``grpo-tui attach``) and talks to it over
the control socket (tui/connection.py). Leaving the dashboard leaves the run going. The run's output
arrives in batches of typed items (``WorkerFrames`` of ``WorkerEvent`` and friends, tui/run_messages.py)
that are buffered in order, with the dashboard's own events (tui/run_events.py) in the same stream;
a timer flushes the buffer once a second (an answer to a key at once), folding every event into the
state through ``RunState.apply``, its one writer, and refreshing each changed widget once
(docs/architecture.md, "Dashboard").

Three homes, each handed what it needs when it is made: the app (this file) composes the widgets,
folds the frames and answers the run's keys; ``RunLink`` (tui/run_link.py, ``app.run_link``) starts
or attaches to the run, decides what to show of how its worker ended, and stops, leaves or detaches; ``DashboardScreen``
(tui/screens/dashboard.py, ``app.dashboard``) draws the state into the widgets and answers the tabs'
keys. Which key does what, and where, is tui/keys.py.
"""

from __future__ import annotations

import gc
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import ClassVar, assert_never

from textual.app import ComposeResult, SystemCommand
from textual.binding import BindingType
from textual.css.query import NoMatches
from textual.containers import Grid, Horizontal, Vertical
from textual.screen import Screen
from textual.timer import Timer
from textual.widget import Widget
from textual.widgets import Static, TabbedContent, TabPane

from grpo_tui.protocol import messages as m
from grpo_tui.protocol.config import Config
from grpo_tui.tui.closing import closing_lines
from grpo_tui.tui.inert_text import clean
from grpo_tui.tui.keys import PALETTE, RUN_KEYS, VIEW_ACTIONS, ExplainedKeys
from grpo_tui.tui.priority import DASHBOARD_NICE, yield_cpu
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
from grpo_tui.tui.run_link import CloseCountdown, Decision, PushScreen, RunLink
from grpo_tui.tui.run_messages import (
    RunItem,
    WorkerBadLine,
    WorkerEvent,
    WorkerExited,
    WorkerFrames,
    WorkerHistory,
    WorkerStderr,
)
from grpo_tui.tui.screens.crash import CrashScreen, MistakeScreen
from grpo_tui.tui.screens.dashboard import DashboardScreen
from grpo_tui.tui.screens.group_view import GroupScreen
from grpo_tui.tui.screens.help import HelpScreen
from grpo_tui.tui.screens.sample_detail import SampleDetailScreen
from grpo_tui.tui.series import HISTORY_LIMIT
from grpo_tui.tui.state import METRICS, ZERO_STD_NOTE, LogEntry, RunState, group_of, log_entry_for
from grpo_tui.tui.steering import Steering
from grpo_tui.tui.views import DISPLAY_MODES, VIEW_TITLES, VIEWS, Part, View, as_view
from grpo_tui.tui.widgets.config_panel import ConfigPanel
from grpo_tui.tui.widgets.doctor_panel import DoctorPanel
from grpo_tui.tui.widgets.key_bar import KeyBar
from grpo_tui.tui.widgets.logs_panel import LogsPanel
from grpo_tui.tui.widgets.metric_tile import MetricTile
from grpo_tui.tui.widgets.progress_panel import ProgressPanel
from grpo_tui.tui.widgets.reward_chart import RewardChart
from grpo_tui.tui.widgets.run_header import RunHeader
from grpo_tui.tui.widgets.samples_panel import SamplesPanel
from grpo_tui.tui.widgets.stats_panel import StatsPanel

# Frames are folded and widgets redrawn once a second (with the header's clock), however fast the
# worker sends: a widget redraws at most that often, and a dashboard's work per second does not grow
# with the step rate. Drawing is most of a viewer's cost, and several viewers share the machine with
# training. What answers a key (paused, resumed, the sample display, an exit) is drawn at once.
FLUSH_INTERVAL_S = 1.0
PROMPT_S = 0.05  # how soon an answer to a key is drawn
LAZY_TABS: tuple[View, ...] = ("database", "charts")  # made when first shown (``GrpoApp.tab_widgets``)


def _answers_a_key(item: RunItem) -> bool:
    """Frames a person waits for after a key: drawn at once, not at the next second."""
    if isinstance(item, WorkerEvent):
        event = item.event  # a periodic checkpoint answers no key: it waits for the next second's redraw
        return isinstance(event, (m.Paused, m.Resumed, m.SampleDisplayChanged, m.SettingChanged, m.SettingRefused,
                                  m.Complete, m.Error)) or (
            isinstance(event, m.Checkpoint) and event.kind != "periodic")
    return isinstance(item, WorkerExited)


def _freeze_startup_objects() -> None:
    """What exists once the screen is drawn (Textual, the widgets, their styles) lives as long as
    the app: frozen out of the collector, a full collection walks only what came after
    (bench/tui_load.py measures the collector's share)."""
    gc.freeze()


class GrpoApp(ExplainedKeys):
    CSS_PATH = "app.tcss"
    TITLE = "grpo-tui"
    # the run's keys work over every screen; the tabs' keys are DashboardScreen's (tui/keys.py)
    BINDINGS: ClassVar[list[BindingType]] = [*RUN_KEYS]
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
        nice: int | None = None,
        stall_after_s: float = 30.0,
    ) -> None:
        """``nice``: the priority the dashboard takes once its run is started (tui/priority.py); the
        command line's dashboards pass one, an app built in a test keeps the test's."""
        super().__init__()
        self.config, self.flush_interval_s, self.nice = config, flush_interval_s, nice
        self.state = RunState(clock=clock, run_name=config.run_name, stall_after_s=stall_after_s)
        self.run_link = RunLink(
            self, self.state, config, config_path=config_path,
            worker_argv=list(worker_argv or [sys.executable, "-m", "grpo_tui.worker", config_path]),
            run_dir=str(Path(run_dir or config.checkpoint.output_dir).resolve()),
            launch=launch, stop_timeout_s=stop_timeout_s,
        )
        self.steering = Steering(self.state, config, self.run_link.send, self.push_screen, self.notify)
        self.dashboard = DashboardScreen(self.state, config, self.steering, self.make_lazy_tab, id="_default")
        self._greeted = False
        self._pending: list[RunItem] = []
        self._prompt: Timer | None = None  # a flush soon: an answer to a key came
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
        return self.dashboard

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

            return ChartsView(app.state.book, app.state.spread, app.dashboard.compared, app.dashboard.chart_settings,
                              id="charts-view")

        return {
            "samples": lambda app: SamplesPanel(id="samples-panel"), "logs": lambda app: LogsPanel(id="logs-panel"),
            "config": lambda app: ConfigPanel(id="config-panel"),
            "database": database,
            "charts": charts,
            "doctor": lambda app: DoctorPanel(id="doctor-panel"),
        }

    async def make_lazy_tab(self, view: View | None) -> None:
        """Mount a lazy tab's widget the first time the tab is shown."""
        if view in LAZY_TABS and not (pane := self.query_one(f"TabPane#{view}", TabPane)).children:
            await pane.mount(self.tab_widgets()[view](self))

    async def on_mount(self) -> None:
        self.query_one("#zero-std").display = False
        self.redraw({"header", "metrics", "progress", "stats", "samples"})
        self.query_one("#config-panel", ConfigPanel).show_config(self.config.to_dict())
        self.set_interval(self.flush_interval_s, self._on_timer)
        self.call_after_refresh(_freeze_startup_objects)
        await self.run_link.connect()
        if self.nice is not None:  # after the launch: the supervisor and its worker keep their priority
            yield_cpu(self.nice)

    async def on_unmount(self) -> None:
        await self.run_link.close()

    async def on_tabbed_content_tab_activated(self, event: TabbedContent.TabActivated) -> None:
        """Keys act on what you see: the tab's main widget takes the focus, the tab's own keys show.
        Handled on the app, not the screen: keys are answered on the app's queue too, so a key pressed
        just after a switch (4, then z) waits until the new tab is made and focused."""
        if not self.screen_stack:  # activated while the app tears down
            return
        view = as_view(event.pane.id)
        await self.make_lazy_tab(view)  # its first showing: mounted before it takes the focus
        self.dashboard.focus_tab(view)
        if "logs" in (view, self._last_tab):  # the log-level key shows on the Logs tab only
            self.refresh_bindings()
        self._last_tab = view

    def on_samples_panel_open(self, message: SamplesPanel.Open) -> None:
        group = group_of(self.state.samples, message.sample.group)
        size = (self.state.config.get("grpo") or {}).get("group_size") or self.config.grpo.group_size
        self.push_screen(GroupScreen(group, size) if message.group else SampleDetailScreen(message.sample, group, size))

    # ------------------------------------------------------------ the run's keys (tui/keys.py)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        status = self.state.status
        if action == "pause":
            return status == "running"
        if action == "resume":
            return status == "paused"
        if action in ("save", "cycle_display", "settings"):
            return status in ("running", "paused")
        if action == "detach":  # leave the run going: only while there is one
            return self.run_link.running
        return True

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        for action, title, help_text in PALETTE:
            if action not in VIEW_ACTIONS:
                if self.check_action(action, ()):
                    yield SystemCommand(title, help_text, getattr(self, f"action_{action}"))
            elif screen is self.dashboard and self.dashboard.offers(action):  # the palette is on top of it now
                yield SystemCommand(title, help_text, getattr(self.dashboard, f"action_{action}"))

    async def action_pause(self) -> None:
        await self.run_link.pause()

    async def action_resume(self) -> None:
        await self.run_link.resume()

    async def action_save(self) -> None:
        await self.run_link.save()
        self.notify("checkpoint requested")

    async def action_cycle_display(self) -> None:
        """m: the run's next sample display. The worker answers with the mode it uses, and every
        viewer (this one too) shows that."""
        mode = DISPLAY_MODES[(DISPLAY_MODES.index(self.display_mode) + 1) % len(DISPLAY_MODES)]
        await self.run_link.show_samples(mode)

    def action_settings(self) -> None:
        self.steering.open()  # t: the live settings (tui/steering.py)

    def action_help(self) -> None:
        self.push_screen(HelpScreen())

    async def action_detach(self) -> None:
        await self.run_link.detach()

    async def action_quit(self) -> None:
        await self.run_link.quit()

    # ------------------------------------------------------------ the flush loop

    def fold(self, items: Sequence[RunItem]) -> None:
        """``items``, after the frames waiting for the timer, folded and drawn now (the run link's ``post``)."""
        self._pending.extend(items)
        self.flush()

    def _fold_own(self, event: DashboardEvent, logs: list[LogEntry]) -> set[Part]:
        """One of the dashboard's own events into the state (and the log); the run's error is also
        a notification."""
        dirty = self.state.apply(event)
        if entry := log_entry_for(event):
            logs.append(entry)
        if isinstance(event, RunFailed):  # may quote stderr: no markup
            self.notify(clean(event.message, single_line=True), severity="error", timeout=10, markup=False)
        return dirty

    def _carry_out(self, decisions: list[Decision], logs: list[LogEntry]) -> set[Part]:
        """What the run link decided, in order: fold its events, push its dialog, close the countdown."""
        dirty: set[Part] = set()
        for decision in decisions:
            match decision:
                case PushScreen(screen=screen, answered=answered):
                    self.push_screen(screen, answered)
                case CloseCountdown():
                    if isinstance(self.screen, (CrashScreen, MistakeScreen)):
                        self.screen.dismiss(None)
                case _:
                    dirty |= self._fold_own(decision, logs)
        return dirty

    def on_worker_frames(self, message: WorkerFrames) -> None:
        """Live frames wait for the next flush (once a second, however fast they come); an answer
        to a key is drawn at once."""
        self._pending.extend(message.items)
        if any(isinstance(item, WorkerExited) and item.exit.final for item in message.items):
            self.run_link.worker_gone.set()
        if self._prompt is None and any(_answers_a_key(item) for item in message.items):
            self._prompt = self.set_timer(PROMPT_S, self._prompt_flush)

    def _prompt_flush(self) -> None:
        self._prompt = None
        self._on_timer(clock=False)

    def on_worker_history(self, message: WorkerHistory) -> None:  # before we connected: folded and drawn at once
        self._pending.extend(message.items)
        self._on_timer()

    def _on_timer(self, clock: bool = True) -> None:
        self._pending += self.run_link.silence() if clock else []  # a stopped or hung worker
        try:
            self.flush(always={"header"} if clock else set())  # the header's elapsed time and ETA tick
        except NoMatches:  # a tick that lands while the app is tearing down its widgets
            pass

    def flush(self, always: set[Part] | None = None) -> None:
        """Fold every buffered frame into the state, then refresh each changed view (and ``always``) once."""
        if not self._pending:
            if always:
                self.redraw(always)
            return
        batch, self._pending = self._pending, []
        dirty: set[Part] = set(always or ())
        logs: list[LogEntry] = []
        steps = [i for i, item in enumerate(batch) if isinstance(item, WorkerEvent) and isinstance(item.event, m.Step)]
        charted = steps[-HISTORY_LIMIT] if len(steps) > HISTORY_LIMIT else 0  # older steps would leave the charts
        for i, item in enumerate(batch):
            match item:
                case WorkerEvent(event=m.Step() as event) if i < charted and self._greeted:
                    self.state.apply(event, charted=False)
                case WorkerEvent(event=event):
                    if isinstance(event, m.Hello):  # a restart's worker, or a retry's
                        dirty |= self._carry_out(self.run_link.hello(), logs)
                    if not self._greeted:  # a worker's first event: is it one of ours?
                        self._greeted = True
                        if (refused := self.run_link.accept(event)) is not None:
                            dirty |= self._fold_own(refused, logs)
                    if self.run_link.refused:
                        continue
                    dirty |= self.state.apply(event)
                    self.steering.tell(event)
                    if entry := log_entry_for(event):
                        logs.append(entry)
                case (RunFailed() | WorkerEnded() | RestartBegan() | StopAsked() | PauseAsked() | WorkerSilent() | OpenedReadOnly()
                  | RunAge() | DashboardNote()):
                    dirty |= self._fold_own(item, logs)
                case WorkerStderr(line=line):
                    self.run_link.heard_stderr(line)
                    level = "error" if "Traceback" in line or "Error" in line else "info"
                    logs.append(LogEntry(level, line, "stderr"))
                case WorkerBadLine(text=text):
                    logs.append(LogEntry("warning", text, "dashboard"))
                case WorkerExited():
                    self.add_logs(logs)
                    logs = []
                    self.redraw(dirty)
                    dirty = set()
                    self._greeted = False  # a restarted worker says hello again
                    dirty |= self._carry_out(self.run_link.worker_exited(item.exit), logs)
                case _:
                    assert_never(item)
        self.add_logs(logs)
        self.redraw(dirty)

    def add_logs(self, entries: list[LogEntry]) -> None:
        if entries:
            self.query_one("#logs-panel", LogsPanel).add(entries)

    def redraw(self, dirty: Iterable[Part]) -> None:
        self.dashboard.show(dirty, self.display_mode)


def run_dashboard(
    config_path: str, config: Config, worker_args: Sequence[str] = (), *, attach_dir: str | None = None,
    compare: Sequence[str] = (),
) -> int:
    """``grpo-tui run`` (starts the run) or, with ``attach_dir``, ``grpo-tui attach``: returns the exit
    code. ``worker_args``: extra worker flags (--ranks); ``compare``: run folders drawn over the charts."""
    path = str(Path(config_path))
    app = GrpoApp(
        path, config, worker_argv=[sys.executable, "-m", "grpo_tui.worker", path, *worker_args],
        run_dir=attach_dir, launch=attach_dir is None, nice=DASHBOARD_NICE,
    )
    app.dashboard.compare_at_start = [Path(folder) for folder in compare]
    code = int(app.run() or 0)
    run, state = app.run_link, app.state
    lines = closing_lines(
        code=code, goes_on=run.detached or (run.running and not run.quitting), run_dir=run.run_dir,
        config_path=path if attach_dir is None else None, steps=state.step, total_steps=state.total_steps,
        error=state.error,
    )
    print("\n".join(lines))
    return code
