"""Every global key from every tab and from every focusable widget of that tab, against the real app
on the real worker (the tiny model): what the user sees after each key.

One worker trains for the whole table. The places are read from the live app (the screen's focus
chain, per tab and per state of the tab), so a widget added later is covered without editing this
file. Every cell is checked and the failures are reported together, as a table of key × place.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from textual.widget import Widget
from textual.widgets import Input, TabbedContent, TabPane

from grpo_tui.protocol.config import load_config
from grpo_tui.tui.app import GrpoApp
from grpo_tui.tui.screens.compare_picker import ComparePickerScreen
from grpo_tui.tui.screens.confirm_quit import ConfirmQuitScreen
from grpo_tui.tui.screens.help import HelpScreen
from grpo_tui.tui.screens.settings import SettingsScreen
from grpo_tui.tui.views import DISPLAY_MODES, VIEWS, View
from grpo_tui.tui.widgets.charts_view import ChartsView
from grpo_tui.tui.screens.database_compare import DatabaseCompareScreen
from grpo_tui.tui.screens.export_dialog import ExportDialog
from grpo_tui.tui.widgets.database_view import DatabaseView
from tests.helpers.pilot import screen_text, settle, until
from tests.helpers.worker_harness import tiny_model, write_config

__all__ = ["tiny_model"]  # the fixture, imported for pytest

SIZE = (200, 50)
# The run is paused between the cells that steer it (r resumes, p pauses again, s saves while
# paused): the table runs against a quiet app, and no cell waits for a step but p's.
KEYS = ("1", "2", "3", "4", "5", "6", "tab", "z", "escape", "question_mark", "m", "t", "C", "r", "p", "s", "q")
PRINTABLE = {"question_mark": "?"}


def pane_of(app: GrpoApp, widget: Widget) -> str | None:
    """The tab a widget lives in, None for the parts around the tabs (the tab bar too)."""
    return next((a.id for a in widget.ancestors_with_self if isinstance(a, TabPane)), None)


def shown(app: GrpoApp) -> list[Widget]:
    """The widgets the terminal shows now (the compositor's map, what the next frame paints)."""
    return list(app.screen._compositor.visible_widgets)


@dataclass
class Place:
    view: View
    widget: Widget
    level: str | None = None  # the Database tab's level the widget is shown at
    before: tuple[str, ...] = ()  # keys typed after focusing it (an arrow inside the charts)

    def __str__(self) -> str:
        name = f"{type(self.widget).__name__}#{self.widget.id}" if self.widget.id else type(self.widget).__name__
        extra = (f" at {self.level}" if self.level else "") + (f" after {'+'.join(self.before)}" if self.before else "")
        return f"{self.view}/{name}{extra}"


class Table:
    """The app under test, the places, and the checks of each key."""

    def __init__(self, app: GrpoApp, pilot) -> None:  # type: ignore[no-untyped-def]
        self.app, self.pilot = app, pilot
        self.tabs = app.query_one(TabbedContent)

    @property
    def db(self) -> DatabaseView:
        return self.app.query_one(DatabaseView)  # mounted when its tab is first shown

    # ------------------------------------------------------------ going to a place

    async def to_level(self, level: str | None) -> None:
        """The Database tab at ``level`` (only while it is the active tab)."""
        db = self.db
        if level is None or db.level == level:
            return
        if level == "generations":
            await self.pilot.press("a")  # every generation of the run
        else:
            while db.level != level:
                db.focus_table()
                await self.pilot.press("escape" if db.level != "runs" else "enter")
                await settle(self.pilot)
        await until(self.pilot, lambda: db.level == level, f"the Database tab at {level}")
        await settle(self.pilot)

    async def go(self, place: Place, key: str = "") -> None:
        app = self.app
        wanted = "running" if key == "p" else "paused"  # a cell that failed half-way may have left it so
        if app.state.status != wanted:
            await (app.action_resume() if wanted == "running" else app.action_pause())
            await until(self.pilot, lambda: app.state.status == wanted, f"the run {wanted}", 60)
        if app.screen is not app.screen_stack[0]:
            app.pop_screen()
        if app.screen.maximized is not None:
            app.screen.minimize()
        if isinstance(app.focused, Input):  # leave the text box as a user does, or the digit is typed
            app.focused.value = ""
            await self.pilot.press("escape")
        if self.tabs.active != place.view:
            await self.pilot.press(str(VIEWS.index(place.view) + 1))
            await until(self.pilot, lambda: self.tabs.active == place.view, f"tab {place.view}")
        await self.to_level(place.level)
        if app.focused is not place.widget:
            place.widget.focus()
            await self.pilot.pause()
        for key in place.before:
            await self.pilot.press(key)

    async def places(self) -> list[Place]:
        """Each tab's focusable widgets (one of each kind), per state of the tab."""
        found: list[Place] = []
        for view in VIEWS:
            levels: tuple[str | None, ...] = ("steps", "generations") if view == "database" else (None,)
            for level in levels:
                await self.go(Place(view, self.tabs.get_pane(view), level))
                chain = [w for w in self.app.screen.focus_chain if pane_of(self.app, w) in (view, None)]
                assert chain, f"nothing to focus on the {view} tab"
                kinds: dict[type, list[Widget]] = {}
                for widget in chain:
                    kinds.setdefault(type(widget), []).append(widget)
                for widgets in kinds.values():
                    for widget in widgets[:1]:
                        if pane_of(self.app, widget) is None and view != VIEWS[0]:
                            continue  # the parts around the tabs: from the first tab only
                        found.append(Place(view, widget, level))
                        if type(widget).__name__ == "ChartPanel" and widget is widgets[0]:  # the reported traps: an arrow first,
                            found.append(Place(view, widget, level, ("down",)))  # the tab full screen and
                            found.append(Place(view, widget, level, ("z", "down")))  # an arrow, a chart
                            found.append(Place(view, widget, level, ("enter",)))  # full screen
        return found

    # ------------------------------------------------------------ what the user sees

    def assert_layout(self, view: str, zoomed: Widget | None = None) -> None:
        """The tab ``view`` shown (full screen: ``zoomed``), nothing of another tab mixed in."""
        app = self.app
        assert app.screen is app.screen_stack[0], f"a dialog is still open: {type(app.screen).__name__}"
        assert self.tabs.active == view, f"the {self.tabs.active} tab is shown, not {view}"
        assert app.screen.maximized is zoomed, f"full screen: {app.screen.maximized}, not {zoomed}"
        strays = sorted({p for w in shown(app) if (p := pane_of(app, w)) not in (None, view)})
        assert not strays, f"parts of the {', '.join(strays)} tab are drawn into the {view} tab"
        assert (app.query_one("#left") in shown(app)) == (zoomed is None), "the metrics column drawn or gone wrongly"
        focused = app.focused
        assert focused is None or pane_of(app, focused) in (view, None), f"the focus is on {focused}, off screen"
        if zoomed is not None and zoomed is not self.tabs:
            assert focused is zoomed or focused is None, "the focus left the chart shown full screen"

    async def check(self, key: str, place: Place) -> None:
        app, pilot = self.app, self.pilot
        focused, zoomed, status = app.focused, app.screen.maximized, app.state.status
        if isinstance(focused, Input) and key not in ("tab", "escape"):
            await self.check_typed(key, focused)
            return
        view = place.view
        kept = zoomed if zoomed is self.tabs else None  # a tab shown full screen stays so on another tab
        if key in "123456":
            await pilot.press(key)
            await until(pilot, lambda: self.tabs.active == VIEWS[int(key) - 1], f"tab {key}")
            await pilot.pause()
            self.assert_layout(VIEWS[int(key) - 1], kept)
        elif key == "tab":
            await pilot.press(key)
            await pilot.pause()
            self.assert_layout(VIEWS[(VIEWS.index(view) + 1) % len(VIEWS)], kept)
        elif key == "z":
            await pilot.press("z")
            await pilot.pause()
            if zoomed is None:
                assert app.screen.maximized is self.tabs, "z did not give the tab the whole screen"
                self.assert_layout(view, self.tabs)
                await pilot.press("z")
                await pilot.pause()
            self.assert_layout(view)
        elif key == "escape":
            await pilot.press("escape")
            await pilot.pause()
            if isinstance(focused, Input):  # esc leaves the text box, on the same tab
                assert not isinstance(app.focused, Input), "esc left the focus in the text box"
            self.assert_layout(view)
        elif key == "question_mark":
            await pilot.press("question_mark")
            await until(pilot, lambda: isinstance(app.screen, HelpScreen), "the help")
            assert "Keys" in screen_text(app)
            await pilot.press("escape")
            await pilot.pause()
            self.assert_layout(view, zoomed)
            assert app.focused is focused, "closing the help moved the focus"
        elif key == "t":
            await pilot.press("t")
            await until(pilot, lambda: isinstance(app.screen, SettingsScreen), "the live settings")
            assert "training.learning_rate" in screen_text(app) and "file: 0.01" in screen_text(app)
            await pilot.press("escape")  # cancel: nothing sent, everything as it was
            await pilot.pause()
            self.assert_layout(view, zoomed)
            assert app.focused is focused, "closing the settings moved the focus"
            assert not app.state.changes
        elif key == "C":
            await pilot.press("C")
            await until(pilot, lambda: isinstance(app.screen, ComparePickerScreen), "the compare picker")
            assert "Compare runs" in screen_text(app)
            await pilot.press("escape")  # cancel: nothing compared, everything as it was
            await pilot.pause()
            self.assert_layout(view, zoomed)
            assert app.focused is focused, "closing the compare picker moved the focus"
            assert not app.dashboard.compared.runs
        elif key == "m":
            before = app.display_mode
            await pilot.press("m")
            after = DISPLAY_MODES[(DISPLAY_MODES.index(before) + 1) % len(DISPLAY_MODES)]
            await until(pilot, lambda: app.display_mode == after, f"the sample display {after}")
            if view == "samples" and zoomed is None:
                await until(pilot, lambda: f"display {after}" in screen_text(app), f"'display {after}' on screen")
            self.assert_layout(view, zoomed)
        elif key == "s":
            saved = len([c for c in app.state.checkpoints if c.kind == "manual"])
            await pilot.press("s")
            await until(pilot, lambda: "checkpoint requested" in [n.message for n in app._notifications], "the notice")
            await until(pilot, lambda: len([c for c in app.state.checkpoints if c.kind == "manual"]) > saved,
                        "the saved checkpoint", 60)
            self.assert_layout(view, zoomed)
        elif key in ("p", "r"):
            wanted, glyph = ("paused", "⏸ paused") if key == "p" else ("running", "▶ running")
            await pilot.press(key)
            await until(pilot, lambda: app.state.status == wanted, f"the run {wanted}", 60)
            await until(pilot, lambda: glyph in screen_text(app), f"{glyph!r} in the header")
            self.assert_layout(view, zoomed)
        elif key == "q":
            await pilot.press("q")
            await until(pilot, lambda: isinstance(app.screen, ConfirmQuitScreen), "the stop/leave/cancel question")
            assert "Stop the run" in screen_text(app) and "Leave it running" in screen_text(app)
            await pilot.press("escape")  # cancel: everything as it was
            await pilot.pause()
            self.assert_layout(view, zoomed)
            assert app.focused is focused, "cancelling the question moved the focus"
            assert app.run_link.connection is not None and app.run_link.connection.running and app.state.status == status

    async def check_typed(self, key: str, box: Input) -> None:
        """A printable key in a text box is text: it goes into the box and steers nothing."""
        app = self.app
        char = PRINTABLE.get(key, key)
        before, status, tab, mode = box.value, app.state.status, self.tabs.active, app.display_mode
        await self.pilot.press(key)
        await self.pilot.pause()
        assert app.screen is app.screen_stack[0], f"{char!r} opened {type(app.screen).__name__}"
        assert (self.tabs.active, app.focused, app.display_mode) == (tab, box, mode), f"{char!r} acted as a key"
        assert app.state.status == status
        typed = box.type == "text" or char.isdigit()
        assert box.value == (before + char if typed else before), f"the box reads {box.value!r}"
        box.value = before


@pytest.mark.slow
async def test_every_global_key_from_every_widget_of_every_tab(tmp_path, tiny_model):
    config_path = write_config(
        tmp_path, tiny_model,
        training={"max_steps": 100000, "num_epochs": 20000, "silent_patience": 0},
        checkpoint={"save_every": 0, "keep_last": 2},
    )  # fmt: skip
    app = GrpoApp(str(config_path), load_config(config_path), stop_timeout_s=60.0)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.state.step >= 2 and app.state.database is not None, "training", 120)
        table = Table(app, pilot)
        await pilot.press("4")
        # the tab's view is mounted once the tab is shown, a moment after the key (later under load)
        await until(pilot, lambda: bool(app.query(DatabaseView)) and table.db.level == "steps",
                    "the run opened in the Database tab")
        places = await table.places()
        failures: list[str] = []
        for place in places:
            for key in KEYS:
                try:
                    await table.go(place, key)
                    await table.check(key, place)
                except AssertionError as exc:
                    failures.append(f"{PRINTABLE.get(key, key):>6} from {place}: {exc}")
        assert not failures, f"{len(failures)} of {len(places) * len(KEYS)} cells:\n" + "\n".join(failures)
        # the Database tab's own dialogs open on the dashboard as they do in browse
        await table.go(Place("database", table.db.query_one("#db-gens"), "generations"))
        for key, dialog in (("e", ExportDialog), ("c", DatabaseCompareScreen)):
            await pilot.press(key)
            await until(pilot, lambda: isinstance(app.screen, dialog), f"{key}: {dialog.__name__}")
            await pilot.press("escape")
            await until(pilot, lambda: app.screen is app.screen_stack[0], f"{key}: its dialog closed")
        app.exit()
