"""The dashboard's own screen, under every pushed screen: it draws the run's state into its widgets,
answers the keys of its tabs (switch, full screen, chart smoothing, log level, open a sample, compare
runs) and gives each tab's main widget the focus.

The app composes the widgets into this screen (``GrpoApp.compose``, tui/app.py), folds the run's
frames into the ``RunState`` it shares with it, and asks it to ``show`` the parts that changed. The
screen's keys are looked up after the focused widget's, so they work from every tab and every focus;
tui/keys.py lists them with the run's keys, which are the app's.

Textual's ``Screen.focused`` is a reactive that repaints the whole screen whenever focus moves,
and every tab switch moves focus into the new tab: in bench/tui_load.py that repaint redrew all
~60 widgets of the screen four times a second. The widgets that gain and lose focus repaint
themselves when their :focus styles change, so nothing else needs redrawing.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import ClassVar

from textual import events, work
from textual.binding import BindingType
from textual.css.query import NoMatches
from textual.message import Message
from textual.reactive import Reactive
from textual.screen import Screen
from textual.widget import Widget
from textual.widgets import Static, TabbedContent

from grpo_tui.protocol import messages as m
from grpo_tui.protocol.config import Config
from grpo_tui.tui.checkpoint_list import CheckpointInfo, describe_checkpoints
from grpo_tui.tui.compare import CompareError
from grpo_tui.tui.compared_runs import RUN_STYLES, ComparedRun, ComparedRuns, candidates, open_run, read_new
from grpo_tui.tui.db.filters import evidence_filter
from grpo_tui.tui.format import eval_note
from grpo_tui.tui.plot import ChartSettings
from grpo_tui.tui.keys import DASHBOARD_KEYS, TAB_FOCUS, VIEW_ACTIONS
from grpo_tui.tui.state import METRICS, ZERO_STD_NOTE, RunState
from grpo_tui.tui.screens.database_dialogs import HostsDatabaseDialogs
from grpo_tui.tui.steering import Steering
from grpo_tui.tui.views import VIEWS, Part, View, as_view
from grpo_tui.tui.widgets.config_panel import ConfigPanel
from grpo_tui.tui.widgets.doctor_panel import DoctorPanel
from grpo_tui.tui.widgets.logs_panel import LogsPanel
from grpo_tui.tui.widgets.metric_tile import MetricTile
from grpo_tui.tui.widgets.progress_panel import ProgressPanel
from grpo_tui.tui.widgets.reward_chart import RewardChart
from grpo_tui.tui.widgets.run_header import RunHeader
from grpo_tui.tui.widgets.samples_panel import SamplesPanel
from grpo_tui.tui.widgets.stats_panel import StatsPanel

COMPARE_POLL_S = 2.0  # how often a compared run's store is read for new steps (a live run)


class CheckpointsScanned(Message):
    def __init__(self, infos: list[CheckpointInfo]) -> None:
        super().__init__()
        self.infos = infos


class DashboardScreen(HostsDatabaseDialogs, Screen[None]):
    BINDINGS: ClassVar[list[BindingType]] = [*DASHBOARD_KEYS]
    focused: Reactive[Widget | None] = Reactive(None, repaint=False)

    def __init__(self, state: RunState, config: Config, steering: Steering,
                 make_tab: Callable[[View | None], Awaitable[None]], *, id: str | None = None) -> None:
        """``steering``: the app's live changes; ``make_tab``: mounts a lazy tab (``GrpoApp.make_lazy_tab``)."""
        super().__init__(id=id)
        self.state, self.config, self.steering, self.make_tab = state, config, steering, make_tab
        self._banner_note: str | None = ZERO_STD_NOTE
        self._footer_status = ""
        self.compared = ComparedRuns()  # C: other runs over the charts, shared by the main chart and the Charts tab
        self.chart_settings = ChartSettings()  # one EMA (and window) for the main chart and the Charts tab
        self.compare_at_start: list[Path] = []  # grpo-tui attach --compare

    def on_resize(self, event: events.Resize) -> None:
        from grpo_tui.tui.screens.too_small import TooSmallScreen, too_small

        if too_small(event.size) and not any(isinstance(s, TooSmallScreen) for s in self.app.screen_stack):
            self.app.push_screen(TooSmallScreen())

    def on_mount(self) -> None:
        chart = self.query_one(RewardChart)
        chart.compared, chart.settings = self.compared, self.chart_settings
        self.set_interval(COMPARE_POLL_S, self._poll_compared)
        if self.compare_at_start:
            self.compare_with(self.compare_at_start)

    # ------------------------------------------------------------ drawing the run

    def show(self, dirty: Iterable[Part], display_mode: m.SampleDisplay) -> None:
        """Refresh each part in ``dirty`` from the state, once."""
        dirty, s = set(dirty), self.state
        if "header" in dirty:
            self.query_one(RunHeader).show(s)
        if "metrics" in dirty:
            self._show_metrics()
        if "progress" in dirty:
            self.query_one(ProgressPanel).show(s)
        if "stats" in dirty:
            self.query_one(StatsPanel).show(s)
        if "samples" in dirty:
            self.query_one(SamplesPanel).show(s.samples, display_mode)
        if "config" in dirty and s.config:
            self.query_one(ConfigPanel).show_config(s.config)
            self.query_one(ConfigPanel).show_changes(s.changes)
        if "config" in dirty or "checkpoints" in dirty:
            self.scan_checkpoints()
        if "database" in dirty and s.database:
            for view in self.query("#database-view"):  # none until the tab is first shown (it reads the store then)
                view.set_store(s.database.path, s.database.run_id)  # type: ignore[attr-defined]
        if "doctor" in dirty or "metrics" in dirty:  # the findings, and their signal's chart
            self.query_one(DoctorPanel).show(s.findings, s.book, s.step)
        if "bindings" in dirty or s.status != self._footer_status:
            self._footer_status = s.status  # the footer is rebuilt on refresh: only when keys change
            self.app.refresh_bindings()  # the keys of the screen shown (a sample's too)

    def _show_metrics(self) -> None:
        s = self.state
        for key, _ in METRICS:
            note = "(no signal)" if key == "loss" and s.zero_std else ""
            self.query_one(f"#tile-{key}", MetricTile).show(s.series(key), note)
        evals = s.eval_curves()
        self.query_one(RewardChart).show(list(s.history_steps), s.series("reward"), s.series("loss"), evals,
                                         marks=s.book.marks)
        for tile in self.query("#tile-eval").results(MetricTile):
            tile.show(evals[0].values, eval_note(s.evals))
        banner = self.query_one("#zero-std", Static)
        said = s.no_signal_note
        if said is not None and said != self._banner_note:
            banner.update(said)
            self._banner_note = said
        if banner.display != (said is not None):
            banner.display = said is not None

    @work(thread=True, exclusive=True, group="scan")
    def scan_checkpoints(self) -> None:
        kinds = {c.path: c.kind for c in self.state.checkpoints}
        folder = self.state.output_dir or self.config.checkpoint.output_dir
        self.post_message(CheckpointsScanned(describe_checkpoints(folder, kinds)))

    async def on_doctor_panel_show_evidence(self, message: DoctorPanel.ShowEvidence) -> None:
        """enter on a finding: the Database tab, its run's generations filtered to the finding's evidence."""
        evidence, store = message.finding.evidence, self.state.database
        if store is None:
            self.notify("no run store yet: the evidence is in it once the worker has started", severity="warning")
            return
        await self.make_tab("database")
        self._switch_tab(self.query_one(TabbedContent), "database")
        f = evidence_filter(store.run_id, evidence.steps, evidence.generations, evidence.finish_reason)
        for database in self.query("#database-view"):
            database.open_filtered(f)  # type: ignore[attr-defined]

    async def on_doctor_panel_apply_suggestion(self, message: DoctorPanel.ApplySuggestion) -> None:
        await self.steering.suggest(message.finding)  # a: through the live settings, as the doctor's

    def on_checkpoints_scanned(self, message: CheckpointsScanned) -> None:
        for panel in self.query(ConfigPanel):  # none while the app tears down
            panel.show_checkpoints(message.infos)

    # ------------------------------------------------------------ the tabs' keys

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        # under a dialog the footer shows none of the tabs' keys (they do nothing there)
        return action not in VIEW_ACTIONS or (self.is_active and self.offers(action))

    def offers(self, action: str) -> bool:
        """Whether the tab shown takes this tab key (the command palette asks too, from on top)."""
        if action == "log_level":  # only where it shows: the footer offers it on the Logs tab
            return self.query_one(TabbedContent).active == "logs"
        if action == "open_sample":  # enter elsewhere belongs to the focused table (e.g. a step)
            return self.query_one(TabbedContent).active == "samples"
        return True

    def action_show_tab(self, tab: View) -> None:
        tabs = self.query_one(TabbedContent)
        if tabs.active == tab:  # already there: the tab itself (not a chart full screen), focused
            if self.maximized is not None and self.maximized is not tabs:
                self.minimize()
            self.focus_tab(tab)
            return
        self._switch_tab(tabs, tab)

    def action_next_tab(self, direction: int) -> None:
        tabs = self.query_one(TabbedContent)
        current = as_view(tabs.active)
        self._switch_tab(tabs, VIEWS[((VIEWS.index(current) if current else 0) + direction) % len(VIEWS)])

    def _switch_tab(self, tabs: TabbedContent, tab: View) -> None:
        """Show ``tab``. The focus is let go first: hiding the old tab moved it to the next focusable
        widget there (the next chart, the Database search box), and TabbedContent switched back to
        the tab that held it: the number keys seemed dead. A chart shown full screen (enter) is
        restored; a whole tab full screen (z) stays so, with the new tab in it. The app focuses the
        new tab's main widget once it is shown (``GrpoApp.on_tabbed_content_tab_activated``)."""
        if self.maximized is not None and self.maximized is not tabs:
            self.minimize()
        self.set_focus(None)
        tabs.active = tab

    def action_toggle_maximize(self) -> None:
        """z: the active tab gets the whole screen (header and keys stay), or gives it back."""
        if self.maximized is not None:
            self.minimize()
            return
        # TabbedContent can't take focus, so Screen.maximize would refuse it: set it directly
        tabs = self.query_one(TabbedContent)
        self.maximized = tabs
        self.focus_tab(as_view(tabs.active))

    def focus_tab(self, view: View | None) -> None:
        """Focus the main widget of ``view`` so its keys work at once."""
        if view == "database":  # lazy tabs (GrpoApp.tab_widgets): made when first shown
            for database in self.query("#database-view"):
                database.focus_table()  # type: ignore[attr-defined]
        elif view == "charts":
            for charts in self.query("#charts-view"):
                charts.focus_chart()  # type: ignore[attr-defined]
        elif view is not None:
            with contextlib.suppress(NoMatches):  # an id lookup (cached), not a walk of every widget
                self.query_one(TAB_FOCUS[view]).focus()

    def action_log_level(self) -> None:
        self.query_one(LogsPanel).cycle_level()

    def action_smoothing(self, direction: int) -> None:
        value = self.chart_settings.step_smoothing(direction)  # one EMA for the main chart and the Charts tab
        self.query_one(RewardChart).settings_changed()
        for charts in self.query("#charts-view"):
            charts.settings_changed()  # type: ignore[attr-defined]
        self.notify(f"chart smoothing (EMA) {value:g}", timeout=2)

    def action_open_sample(self) -> None:
        """enter on the Samples tab where no table took it: the selected sample (the app opens it)."""
        panel = self.query_one(SamplesPanel)
        if sample := panel.selected():
            panel.post_message(SamplesPanel.Open(sample, group=False))

    # ------------------------------------------------------------ compare runs (C, docs/steering.md)

    def _run_folder(self) -> Path:
        return Path(self.state.output_dir or self.config.checkpoint.output_dir).resolve()

    def action_compare(self) -> None:
        self._open_picker()

    @work(thread=True, exclusive=True, group="compare-picker")
    def _open_picker(self) -> None:
        from grpo_tui.tui.runs import run_info
        from grpo_tui.tui.screens.compare_picker import ComparePickerScreen

        here, rows = self._run_folder(), []
        for folder in candidates(self._run_folder()):
            info = run_info(folder)
            where = folder.name if folder.parent == here.parent else str(folder)
            shown = f"{info.status} · step {info.step}/{info.total_steps or '?'}" if info is not None else "?"
            rows.append((folder, f"{where}  ({shown})"))
        self.app.call_from_thread(self.app.push_screen, ComparePickerScreen(rows, self.compared.folders()),
                                  self._picked)

    def _picked(self, folders: list[Path] | None) -> None:
        if folders is not None:
            self.compare_with(folders)

    @work(thread=True, exclusive=True, group="compare")
    def compare_with(self, folders: list[Path]) -> None:
        """Compare with ``folders`` (a run kept keeps its colour and its steps read so far)."""
        kept = {r.folder: r for r in self.compared.runs}
        wanted = {f.resolve() for f in folders}
        chosen: list[ComparedRun] = []
        for folder in folders:
            folder = folder.resolve()
            if folder in kept:
                chosen.append(kept[folder])
                continue
            try:
                taken = {r.style for r in chosen} | {r.style for r in kept.values() if r.folder in wanted}
                chosen.append(open_run(folder, next((s for s in RUN_STYLES if s not in taken), RUN_STYLES[0])))
            except CompareError as exc:
                self.app.call_from_thread(self.notify, str(exc), severity="error", timeout=10, markup=False)
        self.app.call_from_thread(self._show_compared, chosen)

    def _show_compared(self, runs: list[ComparedRun]) -> None:
        self.compared.replace(runs)
        self.query_one(RewardChart).compared_changed()
        names = ", ".join(r.name for r in self.compared.runs)
        self.notify(f"comparing with {names}" if names else "comparing with no other run", timeout=4, markup=False)

    def _poll_compared(self) -> None:
        if self.compared.runs:
            self._read_compared()

    @work(thread=True, exclusive=True, group="compare-poll")
    def _read_compared(self) -> None:
        if sum(read_new(run) for run in list(self.compared.runs)):
            self.app.call_from_thread(self._compared_moved)

    def _compared_moved(self) -> None:
        self.compared.touched()
        self.query_one(RewardChart).compared_changed()

    # ------------------------------------------------------------ fork (f on the Config tab's checkpoints)

    def on_config_panel_fork(self, message: ConfigPanel.Fork) -> None:
        from grpo_tui.tui.screens.fork_dialog import ForkScreen

        step = message.checkpoint.step or 0
        here = self._run_folder()

        def answered(answer: tuple[list[str], str] | None) -> None:
            if answer is not None:
                self._fork(step, *answer)

        self.app.push_screen(ForkScreen(step, str(here.with_name(f"{here.name}-fork-{step}"))), answered)

    @work(thread=True, exclusive=True, group="fork")
    def _fork(self, step: int, items: list[str], folder: str) -> None:
        """Make the fork (tui/fork.py), start it in the background, and compare it with this run."""
        from grpo_tui.protocol.config import load_config
        from grpo_tui.tui.fork import ForkError, make_fork
        from grpo_tui.tui.launcher import DidNotStart, RunLive, start_in_background

        try:
            config_path = make_fork(str(self._run_folder()), str(step), items, None, folder or None)
            # its --set items win over the parent's live changes its checkpoint carries (as grpo-tui fork)
            start_in_background(str(config_path), load_config(config_path), [a for i in items for a in ("--set", i)])
        except (ForkError, RunLive, OSError, DidNotStart) as exc:
            self.app.call_from_thread(self.notify, f"fork: {exc}", severity="error", timeout=15, markup=False)
            return
        child = config_path.parent
        said = f"forked at step {step} into {child}: its first step is {step + 1}; it trains in the background"
        self.app.call_from_thread(self.notify, said, timeout=8, markup=False)
        self.app.call_from_thread(self.compare_with, [*self.compared.folders(), child])
