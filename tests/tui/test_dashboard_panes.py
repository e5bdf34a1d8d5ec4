"""The Charts tab, full-screen panes, focus on tab switches and the layout at every width, driven by
Pilot against the fake worker."""

from __future__ import annotations

from textual.geometry import Region
from textual.command import CommandPalette
from textual.widgets import DataTable, OptionList, Static, TabbedContent, Tabs

from grpo_tui.tui.screens.group_view import GroupScreen
from grpo_tui.tui.screens.sample_detail import SampleDetailScreen
from grpo_tui.tui.state import RunState
from grpo_tui.tui.widgets.chart_panel import ChartPanel
from grpo_tui.tui.widgets.charts_view import WINDOWS, ChartsView
from grpo_tui.tui.widgets.database_generations_table import DatabaseGenerationsTable
from grpo_tui.tui.widgets.database_steps_table import DatabaseStepsTable
from grpo_tui.tui.widgets.database_view import DatabaseView
from grpo_tui.tui.widgets.progress_panel import epoch_note
from grpo_tui.tui.widgets.reward_chart import RewardChart
from grpo_tui.tui.widgets.reward_heatmap import RewardHeatmap
from grpo_tui.tui.widgets.samples_panel import SamplesPanel
from grpo_tui.tui.widgets.stats_panel import cell, pack

from tests.helpers.pilot import screen_text

from .conftest import wait_until
from .sized_scenarios import OPTIONS, make_store

SIZE = (160, 48)


async def started(pilot, steps: int = 24) -> None:  # type: ignore[no-untyped-def]
    app = pilot.app
    samples = app.query_one(SamplesPanel)
    await wait_until(pilot, lambda: app.state.step == steps and len(app.state.samples) == 8 and samples.up_to_date)


async def test_database_tab_takes_focus_and_enter_opens_the_highlighted_step(tmp_path, make_app):
    make_store(tmp_path)
    app = make_app(*OPTIONS)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        await pilot.press("4")
        view = app.query_one(DatabaseView)
        await wait_until(pilot, lambda: view.level == "steps" and len(view.query_one(DatabaseStepsTable).rows_data) == 24)
        assert isinstance(app.focused, DatabaseStepsTable)
        await pilot.press("down", "down", "enter")
        await wait_until(pilot, lambda: view.level == "generations")
        assert not isinstance(app.screen, SampleDetailScreen)  # not the Samples tab's sample
        assert view.filter.step_min == view.filter.step_max == 3 and isinstance(app.focused, DatabaseGenerationsTable)


async def test_z_gives_the_tab_the_whole_screen_and_back(tmp_path, make_app):
    make_store(tmp_path)
    app = make_app(*OPTIONS)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        await pilot.press("4", "z")
        tabs = app.query_one(TabbedContent)
        assert app.screen.maximized is tabs
        await pilot.pause(0.2)
        assert tabs.region.width == SIZE[0] and not app.query_one("#left").region  # the metrics make way
        assert app.query_one("#header").region.height == 1  # the run header stays
        await pilot.press("z")
        assert app.screen.maximized is None
        await pilot.press("z", "escape")  # esc restores too (Textual's minimize)
        assert app.screen.maximized is None
        await pilot.press("ctrl+p")  # the command palette offers it (it asks with the palette on top)
        await wait_until(pilot, lambda: isinstance(app.screen, CommandPalette))
        await pilot.press(*"maximize")
        await wait_until(pilot, lambda: "Maximize or restore the tab" in palette_options(app))
        await pilot.press("enter")
        await wait_until(pilot, lambda: app.screen.maximized is tabs)


def palette_options(app) -> str:  # type: ignore[no-untyped-def]
    return " ".join(str(option.prompt) for option in app.screen.query_one(OptionList).options)


async def test_charts_tab_keys(make_app):
    app = make_app(*OPTIONS)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        await pilot.press("5")
        view = app.query_one(ChartsView)
        assert isinstance(app.focused, RewardHeatmap)  # the tab's keys work at once
        await wait_until(pilot, lambda: app.query_one(RewardHeatmap)._key is not None)
        assert "step 24: 16 rewards · all completions" in str(app.query_one(RewardHeatmap).border_subtitle)
        titles = {p.spec.title for p in view.query(ChartPanel)}
        assert {"accuracy", "xml_format", "loss", "grad norm", "learning rate", "memory MB", "clip ratio"} <= titles
        await pilot.press("right_square_bracket")  # one EMA for the main chart and the Charts tab
        assert view.settings.smoothing == app.query_one(RewardChart).smoothing == 0.8
        await pilot.press("w")
        assert view.settings.window == WINDOWS[1]
        await pilot.press("down")
        focused = app.focused
        assert isinstance(focused, ChartPanel) and focused.spec.title == "reward (total)"
        await pilot.press("enter")
        assert app.screen.maximized is focused
        await pilot.pause(0.3)
        assert focused.size.height > 30 and "24" in focused.plain()
        await pilot.press("escape")
        assert app.screen.maximized is None
        await pilot.press("1", "5")  # back on the tab: the chart focused last, not the first
        assert app.focused is focused


async def test_narrow_terminal_stacks_the_tabs_so_samples_show_completion_text(make_app):
    app = make_app(*OPTIONS)
    async with app.run_test(size=(80, 24)) as pilot:
        await started(pilot)
        await pilot.pause(0.3)
        assert app.screen.has_class("-narrow") and not app.query_one(RewardChart).region
        table = app.query_one("#samples-table", DataTable)
        assert table.region.width == 80 and table.region.height >= 4
        completion = table.columns[list(table.columns)[-1]]
        assert table.region.width - sum(c.get_render_width(table) for c in table.columns.values()) + \
            completion.get_render_width(table) >= 25  # at least 25 cells of completion text
        for key in ("loss", "reward", "reward_std", "kl", "completion_mean_length", "training_tokens_per_s"):
            value = str(app.query_one(f"#tile-{key} .tile-value", Static).render())
            assert value and value != "—", key  # no tile loses its value


def test_stats_cells_never_split_or_touch_at_any_width():
    cells = [cell("tokens", ("", "15,360")), cell("tok/s", ("gen", "2,000"), ("train", "3,740")),
             cell("ms", ("gen", "300"), ("score", "20"), ("train", "180")),
             cell("memory", ("peak", "812.5 MB"), ("active", "600.0 MB")), cell("lr", ("", "0.0002")),
             cell("grad norm", ("", "0.5"))]
    for width in range(40, 251):
        lines = pack(cells, width)
        assert all(line.cell_len <= width for line in lines), width
        joined = "   ".join(line.plain for line in lines)
        assert joined == "   ".join(c.plain for c in cells)  # every cell whole, three blanks between


def test_epoch_bar_note_says_where_max_steps_ends_the_run():
    state = RunState(clock=lambda: 0.0)
    state.total_steps, state.steps_per_epoch, state.epoch, state.step_in_epoch, state.step = 200, 500, 0, 178, 178
    assert epoch_note(state) == "batch 178/500 · run ends at batch 200 (max_steps)"
    state.total_steps, state.steps_per_epoch, state.epoch, state.step_in_epoch = 24, 12, 1, 12
    assert epoch_note(state) == "batch 12/12"  # the run ends with the epoch: nothing to add


async def test_group_view_shows_each_completion_once(make_app):
    app = make_app(*OPTIONS)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        await pilot.press("g")
        assert isinstance(app.screen, GroupScreen)
        shown = "\n".join(str(s.render()) for s in app.screen.query(Static))
        for sample in app.screen.samples:
            assert shown.count(sample.completion[:30]) == 1




async def test_a_tab_switch_repaints_the_tabs_not_the_metrics(make_app):
    """Switching tabs redraws the tab area (and the key bar) in two frames, never the metrics column
    beside it, and lays the screen out once (bench/tui_load.py measures what that saves)."""
    app = make_app(*OPTIONS)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        for key in "2345":  # every tab drawn once, so each switch below shows a drawn tab
            await pilot.press(key)
            await pilot.pause(0.3)
        # the Charts tab (the last shown), made on its first showing, has mounted and drawn its charts
        def charts_drawn() -> bool:  # those in view (the others draw when scrolled to)
            shown = app.query_one("#charts-scroll").region
            return bool(app.query(ChartPanel)) and not any(p.stale for p in app.query(ChartPanel) if p.region.overlaps(shown))

        await wait_until(pilot, charts_drawn)
        await pilot.pause(0.5)
        await pilot.press("1")
        await pilot.pause(0.5)
        compositor = app.screen._compositor
        # the tab bar: a switch redraws it (a chart's own redraw, 4 times a second, does not)
        left, tab_bar = app.query_one("#left").region, app.query_one("#tabs").query_one(Tabs).region
        frames: list[list[Region]] = []  # what each frame redraws
        paint = compositor.render_update

        def recording(*args, **kwargs):  # type: ignore[no-untyped-def]
            frames.append(list(compositor._dirty_regions))
            return paint(*args, **kwargs)

        layouts: list[object] = []
        app.screen.screen_layout_refresh_signal.subscribe(app.screen, layouts.append)
        compositor.render_update = recording  # type: ignore[method-assign]
        keys = "2131451"
        for key in keys:
            await pilot.press(key)
            await pilot.pause(0.1)
        compositor.render_update = paint  # type: ignore[method-assign]
        painted = [region for frame in frames for region in frame]
        assert not [r for r in painted if r.overlaps(left)], "a tab switch repainted the metrics column"
        assert len(layouts) <= len(keys)  # one layout per switch, none per widget
        # two frames a switch (the tab, then what focus moved); the underline's slide drew 20
        tab_frames = [frame for frame in frames if any(r.overlaps(tab_bar) for r in frame)]
        assert len(keys) <= len(tab_frames) <= 2 * len(keys), frames


async def test_a_tile_without_values_draws_no_line(make_app):
    """kl with beta = 0: the tile says "—" and leaves its sparkline row blank, not a flat line of its lowest bar."""
    app = make_app("--steps", "6", "--no-kl", "--hold")
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: app.state.step == 6)
        await pilot.pause()
        kl, loss = (app.query_one(f"#tile-{key}").region for key in ("kl", "loss"))
        lines = screen_text(app).splitlines()

        def inside(region: Region) -> list[str]:
            return [line[region.x + 1:region.right - 1] for line in lines[region.y + 1:region.bottom - 1]]

        assert inside(kl)[0].strip() == "—" and inside(kl)[1].strip() == ""
        assert set(inside(loss)[1].strip()) - {" "} and "▁" not in "".join(inside(kl))


async def test_progress_bars_of_unknown_length_do_not_animate():
    """Before the worker's init says the totals (or all run long for an epoch of unknown length),
    the bars stay still: Textual's animation repainted them 15 times a second, in every viewer."""
    from textual.app import App

    from grpo_tui.tui.widgets.progress_panel import ProgressPanel

    class Bars(App[None]):
        def compose(self):  # type: ignore[no-untyped-def]
            yield ProgressPanel()

    app = Bars()
    async with app.run_test(size=(80, 6)) as pilot:
        state = RunState(clock=lambda: 0.0)
        assert not state.steps_per_epoch and not state.total_steps
        app.query_one(ProgressPanel).show(state)
        await pilot.pause(0.3)
        compositor = app.screen._compositor
        paint, frames = compositor.render_update, []

        def recording(*args, **kwargs):  # type: ignore[no-untyped-def]
            frames.append(list(compositor._dirty_regions))
            return paint(*args, **kwargs)

        compositor.render_update = recording  # type: ignore[method-assign]
        await pilot.pause(1.0)
        compositor.render_update = paint  # type: ignore[method-assign]
        assert len(frames) <= 1, f"{len(frames)} screen updates in a second with nothing new"
