"""The dashboard's keys and command palette: what each key does and when it is offered.

``DashboardKeys`` is the base of ``GrpoApp`` (tui/app.py), which owns the state, the worker and
the flush loop (docs/architecture.md, "Dashboard").
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable

from textual.app import App, SystemCommand
from textual.binding import Binding
from textual.css.query import NoMatches
from textual.screen import Screen
from textual.widgets import TabbedContent

from grpo_tui.protocol import messages as m
from grpo_tui.protocol.config import Config
from grpo_tui.tui.screens.group_view import GroupScreen
from grpo_tui.tui.screens.help import HelpScreen
from grpo_tui.tui.screens.sample_detail import SampleDetailScreen
from grpo_tui.tui.state import RunState, group_of
from grpo_tui.tui.views import DISPLAY_MODES, VIEWS, View, as_view
from grpo_tui.tui.widgets.logs_panel import LogsPanel
from grpo_tui.tui.widgets.reward_chart import RewardChart
from grpo_tui.tui.widgets.samples_panel import SamplesPanel
from grpo_tui.tui.connection import RunConnection

# (action, palette title, palette help) — the command palette offers the same actions as the keys.
PALETTE: tuple[tuple[str, str, str], ...] = (
    ("pause", "Pause training", "Pause at the next step boundary (p)"),
    ("resume", "Resume training", "Continue a paused run (r)"),
    ("save", "Save checkpoint", "Write a checkpoint now (s)"),
    ("cycle_display", "Cycle sample display", f"{' · '.join(DISPLAY_MODES)} (m)"),
    ("detach", "Detach", "Close the dashboard, leave the run going (d)"),
    ("toggle_maximize", "Maximize or restore the tab", "Give the active tab the whole screen, and back (z)"),
    ("help", "Show keys", "All key bindings (?)"),
)
# The widget each tab focuses when it is shown (keys act on what you see); the Database and Charts
# tabs pick their own (the table of the level shown, the first chart).
TAB_FOCUS: dict[View, str] = {"samples": "#samples-table", "logs": "#logs-view", "config": "#checkpoints-table"}


class DashboardKeys(App[int]):
    BINDINGS = [
        Binding("p", "pause", "pause"),
        Binding("r", "resume", "resume"),
        Binding("s", "save", "save ckpt"),
        Binding("m", "cycle_display", "display"),
        *(Binding(str(i + 1), f"show_tab('{t}')", t, show=False) for i, t in enumerate(VIEWS)),
        Binding("tab", "next_tab(1)", "next tab", show=False, priority=True),
        Binding("shift+tab", "next_tab(-1)", "previous tab", show=False, priority=True),
        Binding("enter", "open_sample", "open sample", show=False),
        Binding("left_square_bracket", "smoothing(-1)", "less smoothing", show=False),
        Binding("right_square_bracket", "smoothing(1)", "more smoothing", show=False),
        Binding("l", "log_level", "log level"),
        Binding("z", "toggle_maximize", "maximize"),
        Binding("question_mark", "help", "help"),
        Binding("d", "detach", "detach", show=False),  # in the help and the quit dialog: the footer is full
        Binding("q", "quit", "quit"),
    ]

    # Set by GrpoApp.__init__.
    config: Config
    state: RunState
    proc: RunConnection | None

    @property
    def display_mode(self) -> m.SampleDisplay:
        raise NotImplementedError
    _last_tab: View | None
    quitting: bool
    detached: bool

    async def _send(self, command: m.Command) -> None:
        if not self.proc or not await self.proc.send(command):
            self.notify("the worker is not running", severity="warning")

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        status = self.state.status
        if action == "pause":
            return status == "running"
        if action == "resume":
            return status == "paused"
        if action in ("save", "cycle_display"):
            return status in ("running", "paused")
        if action == "detach":  # leave the run going: only while there is one
            return self.proc is not None and self.proc.running
        if action in ("next_tab", "show_tab", "open_sample", "smoothing", "log_level", "toggle_maximize"):
            if self.screen is not self.screen_stack[0]:
                return False
            if action == "log_level":  # only where it shows: the footer offers it on the Logs tab
                return self.query_one(TabbedContent).active == "logs"
            if action == "open_sample":  # enter elsewhere belongs to the focused table (e.g. a step)
                return self.query_one(TabbedContent).active == "samples"
        return True

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        for action, title, help_text in PALETTE:
            if self.check_action(action, ()):
                yield SystemCommand(title, help_text, getattr(self, f"action_{action}"))

    async def action_detach(self) -> None:
        """d: leave the run going and close this dashboard (``grpo-tui attach`` comes back to it)."""
        self.quitting = self.detached = bool(self.proc and self.proc.running)
        if self.proc:
            await self.proc.close()
        self.exit(0)

    async def action_pause(self) -> None:
        await self._send(m.Pause())

    async def action_resume(self) -> None:
        await self._send(m.Resume())

    async def action_save(self) -> None:
        await self._send(m.SaveCheckpoint())
        self.notify("checkpoint requested")

    async def action_cycle_display(self) -> None:
        """m: the run's next sample display. The worker answers with the mode it uses, and every
        viewer (this one too) shows that."""
        mode = DISPLAY_MODES[(DISPLAY_MODES.index(self.display_mode) + 1) % len(DISPLAY_MODES)]
        await self._send(m.SetSampleDisplay(mode=mode))

    def action_show_tab(self, tab: View) -> None:
        tabs = self.query_one(TabbedContent)
        if tabs.active == tab:  # already there: the tab itself (not a chart full screen), focused
            if self.screen.maximized is not None and self.screen.maximized is not tabs:
                self.screen.minimize()
            self.focus_tab(tab)
            return
        self._switch_tab(tabs, tab)

    def _switch_tab(self, tabs: TabbedContent, tab: View) -> None:
        """Show ``tab``. The focus is let go first: hiding the old tab moved it to the next focusable
        widget there (the next chart, the Database search box), and TabbedContent switched back to
        the tab that held it: the number keys seemed dead. A chart shown full screen (enter) is
        restored; a whole tab full screen (z) stays so, with the new tab in it."""
        screen = self.screen
        if screen.maximized is not None and screen.maximized is not tabs:
            screen.minimize()
        screen.set_focus(None)
        tabs.active = tab

    def action_toggle_maximize(self) -> None:
        """z: the active tab gets the whole screen (header and keys stay), or gives it back."""
        screen = self.screen
        if screen.maximized is not None:
            screen.minimize()
            return
        # TabbedContent can't take focus, so Screen.maximize would refuse it: set it directly
        screen.maximized = self.query_one(TabbedContent)
        self.focus_tab(as_view(self.query_one(TabbedContent).active))

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

    def action_next_tab(self, direction: int) -> None:
        tabs = self.query_one(TabbedContent)
        current = as_view(tabs.active)
        self._switch_tab(tabs, VIEWS[((VIEWS.index(current) if current else 0) + direction) % len(VIEWS)])

    async def make_lazy_tab(self, view: View | None) -> None:
        raise NotImplementedError

    async def on_tabbed_content_tab_activated(self, event: TabbedContent.TabActivated) -> None:
        # keys act on what you see: focus the tab's main widget, and show the tab's own keys
        if not self.screen_stack:  # activated while the app tears down
            return
        view = as_view(event.pane.id)
        await self.make_lazy_tab(view)  # its first showing: mounted before it takes the focus
        self.focus_tab(view)
        if "logs" in (view, self._last_tab):  # the log-level key shows on the Logs tab only
            self.refresh_bindings()
        self._last_tab = view

    def action_log_level(self) -> None:
        self.query_one(LogsPanel).cycle_level()

    def action_smoothing(self, direction: int) -> None:
        value = self.query_one(RewardChart).change_smoothing(direction)
        for charts in self.query("#charts-view"):  # one EMA for the main chart and the Charts tab
            charts.set_smoothing(value)  # type: ignore[attr-defined]
        self.notify(f"chart smoothing (EMA) {value:g}", timeout=2)

    def action_open_sample(self) -> None:
        if sample := self.query_one(SamplesPanel).selected():
            self.on_samples_panel_open(SamplesPanel.Open(sample, group=False))

    def on_samples_panel_open(self, message: SamplesPanel.Open) -> None:
        group = group_of(self.state.samples, message.sample.group)
        size = (self.state.config.get("grpo") or {}).get("group_size") or self.config.grpo.group_size
        self.push_screen(GroupScreen(group, size) if message.group else SampleDetailScreen(message.sample, group, size))

    def action_help(self) -> None:
        self.push_screen(HelpScreen())
