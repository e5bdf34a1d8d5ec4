"""The Charts tab: every metric the worker sends as its own small chart, in titled groups.

The view is handed the books it draws from (``add_group``) and polls their versions on a slow
timer, redrawing only while it is on screen and only the charts whose data moved: the cost of
watching does not grow with the step rate. Keys: arrows move between charts, enter shows the
focused chart full screen (esc back), w switches between the last N steps and the whole run.
Runs compared with this one (``C``) are drawn over the step charts by each panel.
"""

from __future__ import annotations

import re

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Grid, Vertical, VerticalScroll
from textual.widget import Widget
from textual.widgets import Static

from grpo_tui.tui.compared_runs import ComparedRuns
from grpo_tui.tui.series import STEP_GROUPS, GroupSpec, RewardSpread, SeriesBook
from grpo_tui.tui.glyph_text import tidy
from grpo_tui.tui.plot import ChartSettings
from grpo_tui.tui.widgets.chart_panel import ChartPanel, Move
from grpo_tui.tui.widgets.busy_timeline_strip import BusyTimelineStrip
from grpo_tui.tui.widgets.prompt_pool_strip import PromptPoolStrip
from grpo_tui.tui.widgets.reward_heatmap import RewardHeatmap

REDRAW_INTERVAL_S = 0.25  # a look four times a second: each chart redraws at most every 0.5 s
REDRAWS_PER_TICK = 4  # charts drawn per look: a key press never waits behind the whole grid
WINDOWS: tuple[int | None, ...] = (100, 500, None)  # w cycles: last 100 steps, last 500, whole run
PANEL_WIDTH = 38  # a chart's width target: the grid fits as many columns as the tab allows


def _slug(text: str) -> str:
    return re.sub(r"[^a-zA-Z0-9_-]", "-", text)


class ChartsView(Vertical):
    DEFAULT_CSS = """
    ChartsView { height: 1fr; }
    ChartsView #charts-bar { height: 1; padding: 0 1; background: $boost; }
    ChartsView #charts-scroll { height: 1fr; }
    ChartsView .charts-group-title { height: 1; padding: 0 1; text-style: bold; color: $text-accent; }
    ChartsView .charts-grid { height: auto; grid-size: 2; grid-rows: 9; grid-gutter: 0 1; padding: 0 1; }
    ChartsView RewardHeatmap, ChartsView PromptPoolStrip, ChartsView BusyTimelineStrip { margin: 0 1; }
    ChartsView PromptPoolStrip, ChartsView #charts-title-prompt-pool { display: none; }
    ChartsView BusyTimelineStrip, ChartsView #charts-title-busy-timeline { display: none; }
    """
    BINDINGS = [
        Binding("w", "window", "steps shown"),
        Binding("enter", "zoom", "chart full screen"),
        Binding("up", "move(0, -1)", "up", show=False),
        Binding("down", "move(0, 1)", "down", show=False),
        Binding("left", "move(-1, 0)", "left", show=False),
        Binding("right", "move(1, 0)", "right", show=False),
    ]

    def __init__(self, book: SeriesBook | None = None, spread: RewardSpread | None = None,
                 compared: ComparedRuns | None = None, settings: ChartSettings | None = None, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.settings = settings if settings is not None else ChartSettings()  # the main chart's too (one EMA)
        self.compared = compared  # other runs over the step charts (C; not over eval groups' own books)
        self.book = book if book is not None else SeriesBook()
        self.spread = spread if spread is not None else RewardSpread()
        self.groups: list[tuple[GroupSpec, SeriesBook]] = [(g, self.book) for g in STEP_GROUPS]
        self._seen: dict[str, int] = {}  # group -> how many columns its book had at the last sync
        self.columns = 2
        self._last_focused: Widget | None = None
        self._panels: list[Widget] | None = None

    def compose(self) -> ComposeResult:
        yield Static(id="charts-bar")
        with VerticalScroll(id="charts-scroll"):
            title = Text.assemble(("reward distribution", "bold"), ("  brighter = more of the step's completions", "dim"))
            yield Static(tidy(title), classes="charts-group-title")
            yield RewardHeatmap(self.spread, self.settings, id="chart-reward-distribution")
            title = Text.assemble(("prompt pool", "bold"), ("  the curriculum's prompts by state, bottom up", "dim"))
            yield Static(tidy(title), classes="charts-group-title", id="charts-title-prompt-pool")
            yield PromptPoolStrip(self.book, self.settings, id="chart-prompt-pool")
            title = Text.assemble(("asynchronous steps", "bold"), ("  who waited for whom ([async])", "dim"))
            yield Static(tidy(title), classes="charts-group-title", id="charts-title-busy-timeline")
            yield BusyTimelineStrip(self.book, self.settings, id="chart-busy-timeline")
            for spec, _ in self.groups:
                yield from self._group_widgets(spec)

    def _group_widgets(self, spec: GroupSpec) -> list[Widget]:
        return [Static(Text(spec.name, "bold"), classes="charts-group-title", id=f"charts-title-{_slug(spec.name)}"),
                Grid(classes="charts-grid", id=f"charts-group-{_slug(spec.name)}")]

    def on_mount(self) -> None:
        self._show_bar()
        self._sync()
        self.set_interval(REDRAW_INTERVAL_S, self._tick)

    # ------------------------------------------------------------ data in

    def add_group(self, spec: GroupSpec, book: SeriesBook) -> None:
        """Another group of charts (e.g. eval curves) drawn from its own book, below the others."""
        self.groups.append((spec, book))
        if self.is_mounted:
            self.query_one("#charts-scroll").mount_all(self._group_widgets(spec))
            self.call_after_refresh(self._sync)

    def settings_changed(self) -> None:
        """The shared settings moved (the smoothing keys): the bar and the charts in view again."""
        self._show_bar()
        self._redraw()

    # ------------------------------------------------------------ redrawing

    def _tick(self) -> None:
        zoomed = self.screen.maximized
        # a hidden tab costs nothing but this check
        if self.is_on_screen or (zoomed is not None and zoomed in self.panels()):
            self._sync()
            self._redraw()

    def _sync(self) -> None:
        """Mount a chart for each column that appeared since the last look (a new reward function)."""
        for strip, title in ((self.query_one(PromptPoolStrip), "#charts-title-prompt-pool"),  # a curriculum's
                             (self.query_one(BusyTimelineStrip), "#charts-title-busy-timeline")):  # [async]'s
            if strip.shown() != strip.display:
                strip.display = self.query_one(title).display = strip.shown()
                self._panels = None
        for spec, book in self.groups:
            count = len(book.keys())
            if self._seen.get(spec.name) == count:
                continue
            grids = self.query(f"#charts-group-{_slug(spec.name)}").results(Grid)
            grid = next(grids, None)
            if grid is None:  # added while running: mounted by the next refresh
                continue
            self._seen[spec.name] = count
            have = {p.spec.title for p in grid.query(ChartPanel)}
            keys = set(book.keys())
            # a chart, and a group, only once it has a column (a one-rank run never shows "ranks")
            compared = self.compared if book is self.book else None
            new = [ChartPanel(p, book, self.settings, compared, id=f"chart-{_slug(spec.name)}-{_slug(p.title)}")
                   for p in spec.resolve(book.keys()) if p.title not in have
                   and (p.shown_with in keys if p.shown_with else any(k in keys for k, _ in p.lines))]
            if new:
                grid.mount_all(new)
                self._panels = None
            shown = bool(have or new)
            for widget in self.query(f"#charts-title-{_slug(spec.name)}, #charts-group-{_slug(spec.name)}"):
                widget.display = shown

    def _redraw(self) -> None:
        """Redraw a few of the stale charts in view, those waiting longest first; charts scrolled
        out of view draw when they come back (their drawing is keyed on the data's version)."""
        shown = self.query_one("#charts-scroll").region
        zoomed = self.screen.maximized
        candidates = [zoomed] if zoomed in self.panels() else [w for w in self.panels() if w.region.overlaps(shown)]
        stale = [w for w in candidates if w.stale]  # type: ignore[attr-defined]
        stale.sort(key=lambda w: w.drawn_at)  # type: ignore[attr-defined]
        for widget in stale[:REDRAWS_PER_TICK]:
            widget.redraw()  # type: ignore[attr-defined]

    def on_resize(self) -> None:
        columns = max(1, (self.size.width - 2) // PANEL_WIDTH)
        if columns != self.columns:
            self.columns = columns
            for grid in self.query(".charts-grid"):
                grid.styles.grid_size_columns = columns

    def _show_bar(self) -> None:
        window = self.settings.window
        text = Text(no_wrap=True, overflow="ellipsis")
        text.append("steps ", "dim").append("whole run" if window is None else f"last {window}", "bold")
        text.append(" (w) · ", "dim").append("EMA ", "dim").append(f"{self.settings.smoothing:g}", "bold")
        text.append(" ([ ]) · ", "dim").append("enter", "bold").append(" full screen · esc back · arrows move", "dim")
        self.query_one("#charts-bar", Static).update(tidy(text))

    # ------------------------------------------------------------ keys

    def panels(self) -> list[Widget]:
        """The charts in screen order (kept: a query walks every chart, four times a second)."""
        if self._panels is None:
            self._panels = [w for w in self.query("ChartPanel, RewardHeatmap, PromptPoolStrip, BusyTimelineStrip") if w.display]
        return self._panels

    def action_window(self) -> None:
        window = WINDOWS[(WINDOWS.index(self.settings.window) + 1) % len(WINDOWS)]
        self.settings.change(window=window)
        self._show_bar()
        self._redraw()

    def action_zoom(self) -> None:
        focused = self.screen.focused
        if focused is None or focused not in self.panels():
            focused = self.focus_chart()
        if focused is not None:
            self.screen.maximize(focused, container=False)

    def focus_chart(self) -> Widget | None:
        """Focus the chart focused last (the first one the first time); returns it."""
        panels = self.panels()
        if self._last_focused in panels:
            self._last_focused.focus()
            return self._last_focused
        if not panels:
            return None
        # the first chart is at the top already; scrolling it "into view" while the tab is still being
        # laid out scrolled its group title away, depending on timing
        panels[0].focus(scroll_visible=False)
        return panels[0]

    def on_move(self, message: Move) -> None:
        message.stop()
        self.action_move(message.dx, message.dy)

    def action_move(self, dx: int, dy: int) -> None:
        panels = self.panels()
        if not panels:
            return
        focused = self.screen.focused
        if focused not in panels:
            self.focus_chart()
            return
        i = panels.index(focused)
        # the heatmap spans a row of its own; inside a grid, up/down jump a row of charts
        step = dx if dy == 0 else dy * (1 if isinstance(focused, (RewardHeatmap, PromptPoolStrip, BusyTimelineStrip)) else self.columns)
        # remembered here, not on every focus event: hiding the tab moves focus through the charts
        self._last_focused = panels[max(0, min(len(panels) - 1, i + step))]
        self._last_focused.focus()
