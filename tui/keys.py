"""The dashboard's keys and command palette: which key does what, and where it works.

Textual looks a key up along the focus chain: the focused widget, its parents, the screen, then the
app. The run's keys (``RUN_KEYS``: pause, resume, save, the sample display, help, detach, quit) are
the app's (``GrpoApp``, tui/app.py), so they work over every screen pushed on the dashboard too (a
sample, a group). The keys of the tabs (``VIEW_KEYS``: switch, full screen, smoothing, log level,
open a sample, compare runs) are the dashboard screen's (``DashboardScreen``, tui/screens/dashboard.py) and act on
what it shows. The screen lists the run's keys again, as the app's actions, so that the key bar
shows every key in one order (``DASHBOARD_KEYS``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from textual.actions import ActionParseResult
from textual.app import App
from textual.dom import DOMNode
from textual.binding import Binding

from grpo_tui.tui.views import DISPLAY_MODES, VIEWS, View

if TYPE_CHECKING:
    from grpo_tui.tui.run_link import RunLink
    from grpo_tui.tui.state import RunState

STEER_KEYS = [
    Binding("p", "pause", "pause"),
    Binding("r", "resume", "resume"),
    Binding("s", "save", "save ckpt"),
    Binding("m", "cycle_display", "display"),
    Binding("t", "settings", "settings", show=False),  # in the help and the palette: the footer is full
]
SESSION_KEYS = [
    Binding("question_mark", "help", "help"),
    Binding("d", "detach", "detach", show=False),  # in the help and the quit dialog: the footer is full
    Binding("q", "quit", "quit"),
]
RUN_KEYS = [*STEER_KEYS, *SESSION_KEYS]
VIEW_KEYS = [
    *(Binding(str(i + 1), f"show_tab('{t}')", t, show=False) for i, t in enumerate(VIEWS)),
    Binding("tab", "next_tab(1)", "next tab", show=False, priority=True),
    Binding("shift+tab", "next_tab(-1)", "previous tab", show=False, priority=True),
    Binding("enter", "open_sample", "open sample", show=False),
    Binding("left_square_bracket", "smoothing(-1)", "less smoothing", show=False),
    Binding("right_square_bracket", "smoothing(1)", "more smoothing", show=False),
    Binding("l", "log_level", "log level"),
    Binding("z", "toggle_maximize", "maximize"),
    Binding("C", "compare", "compare runs", show=False),
]
# Moving through a table or the log as mlx-node's terminal UI (and vi) does, on the focused table or
# log; a text box takes them as text. In the tables ``g`` stays the group view (Samples, Database),
# so the first row is ``home`` there; the log has ``g`` too.
TABLE_KEYS = [
    Binding("j", "cursor_down", "down", show=False),
    Binding("k", "cursor_up", "up", show=False),
    Binding("G", "scroll_bottom", "last row", show=False),
]
LOG_KEYS = [
    Binding("j", "scroll_down", "down", show=False),
    Binding("k", "scroll_up", "up", show=False),
    Binding("g", "scroll_home", "first line", show=False),
    Binding("G", "scroll_end", "last line", show=False),
]
# The actions of VIEW_KEYS (the dashboard screen's), by name.
VIEW_ACTIONS = frozenset(key.action.split("(")[0] for key in VIEW_KEYS)


def _on_app(keys: list[Binding]) -> list[Binding]:
    return [replace(key, action=f"app.{key.action}") for key in keys]


# The dashboard screen's keys, in the key bar's order: the run's first, the tabs' keys, help, detach, quit.
DASHBOARD_KEYS = [*_on_app(STEER_KEYS), *VIEW_KEYS, *_on_app(SESSION_KEYS)]

# (action, palette title, palette help) — the command palette offers the same actions as the keys;
# those in VIEW_ACTIONS are the dashboard screen's, the others the app's.
PALETTE: tuple[tuple[str, str, str], ...] = (
    ("pause", "Pause training", "Pause at the next step boundary (p)"),
    ("resume", "Resume training", "Continue a paused run (r)"),
    ("save", "Save checkpoint", "Write a checkpoint now (s)"),
    ("cycle_display", "Cycle sample display", f"{' · '.join(DISPLAY_MODES)} (m)"),
    ("settings", "Change live settings", "The run's settings that change from the next step on: now, in the file (t)"),
    ("detach", "Detach", "Close the dashboard, leave the run going (d)"),
    ("compare", "Compare runs", "Draw other runs (parent, forks, runs beside it) over this run's charts (C)"),
    ("toggle_maximize", "Maximize or restore the tab", "Give the active tab the whole screen, and back (z)"),
    ("help", "Show keys", "All key bindings (?)"),
)
# The widget each tab focuses when it is shown (keys act on what you see); the Database and Charts
# tabs pick their own (the table of the level shown, the first chart).
TAB_FOCUS: dict[View, str] = {"samples": "#samples-table", "logs": "#logs-view", "config": "#checkpoints-table",
                              "doctor": "#doctor-table"}

# The run's keys that only a running (or paused) run can act on, and what each does.
NEEDS_LIVE_RUN = {"pause": "p (pause)", "resume": "r (resume)", "save": "s (save a checkpoint)",
                  "cycle_display": "m (the sample display)", "settings": "t (the live settings)"}


class ExplainedKeys(App[int]):
    """The dashboard app's base: a run key pressed when it cannot act (its ``check_action`` says no)
    says why instead of nothing, and the palette's Screenshot saves where the run is."""

    state: RunState  # the subclass's: the run's status now
    run_link: RunLink  # the subclass's: the run's folder

    def deliver_screenshot(self, filename: str | None = None, path: str | None = None,
                           time_format: str | None = None) -> str | None:
        """Into the run's folder (else the current one), not ~/Downloads, which may not exist; Textual's
        notice says the file's path."""
        if path is None:
            folder = Path(self.run_link.run_dir)
            path = str(folder if folder.is_dir() else Path.cwd())
        return super().deliver_screenshot(filename, path, time_format)

    async def run_action(self, action: str | ActionParseResult, default_namespace: DOMNode | None = None,
                         namespaces: Mapping[str, DOMNode] | None = None) -> bool:
        if await super().run_action(action, default_namespace, namespaces):
            return True
        target, name, _ = self._parse_action(action, self if default_namespace is None else default_namespace, namespaces)
        status = self.state.status
        if target is not self or name not in NEEDS_LIVE_RUN or status in ("running", "paused"):
            return False
        why = "this run is over" if status in ("done", "error") else f"the run is {status}"
        self.notify(f"{why}: {NEEDS_LIVE_RUN[name]} needs a running run", severity="warning", markup=False)
        return True
