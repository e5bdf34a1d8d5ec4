"""The Charts tab's parts on their own: the series book, the drawings, and the view under Pilot."""

from __future__ import annotations

from textual.app import App, ComposeResult

from grpo_tui.protocol import messages as m
from grpo_tui.tui.plot import HEAT, Series, heat_strip, line_chart
from grpo_tui.tui.glyph_text import tidy
from grpo_tui.tui.series import STEP_GROUPS, RewardSpread, SeriesBook, dict_group, flatten_step
from grpo_tui.tui.widgets.chart_panel import ChartPanel
from grpo_tui.tui.widgets.charts_view import WINDOWS, ChartsView
from grpo_tui.tui.widgets.reward_heatmap import RewardHeatmap
from grpo_tui.tui.widgets.text_strips import text_strips
from rich.console import Console, Group
from rich.text import Span, Text
from textual.visual import Visual, visualize
from textual.widget import Widget

from tests.helpers.fake_worker import parse_args, step_frame


def test_book_columns_appear_padded_and_scroll_out_together():
    book = SeriesBook(limit=3)
    book.append(1, {"a": 1.0})
    book.append(2, {"a": 2.0, "b": float("nan")})
    book.append(3, {"b": 3.0})
    book.append(4, {"a": 4.0, "b": 4.0})
    assert list(book.steps) == [2, 3, 4]
    assert book.column("a") == [2.0, None, 4.0]
    assert book.column("b") == [None, 3.0, 4.0]  # NaN kept as a gap
    assert book.column("missing") == [None, None, None]
    assert book.latest("a") == 4.0 and book.version == 4


def test_flatten_step_names_every_metric():
    row = flatten_step(step_frame(3, 0, parse_args([])))
    assert row["reward"] == step_frame(3, 0, parse_args([])).reward
    assert {"rewards/accuracy", "rewards/xml_format", "clip_ratio/low", "clip_ratio/high", "clip_ratio/region",
            "grad_norm", "learning_rate", "peak_memory_mb", "training_tokens_per_s", "step_ms"} <= row.keys()
    assert row["step_ms"] == 500.0 and "step" not in row and "gradients_applied" not in row


def test_every_step_column_has_a_chart():
    row = flatten_step(step_frame(3, 0, parse_args([])))
    charted = {key for group in STEP_GROUPS for panel in group.resolve(list(row)) for key, _ in panel.lines}
    assert set(row) - charted == {"num_tokens"}  # a count per step, summed in the stats panel instead


def test_dict_group_charts_each_key_of_its_book():
    group = dict_group("eval", ["accuracy", "format"])
    assert [p.title for p in group.resolve(["accuracy", "format", "other"])] == ["accuracy", "format", "other"]


def test_line_chart_has_its_size_axis_labels_and_a_gap_for_no_data():
    rows = line_chart([Series("r", [1, 2, 3, 4], [0.0, 0.5, 0.25, 1.0])], 30, 6)
    assert len(rows) == 6 and all(r.cell_len == 30 for r in rows)
    assert rows[0].plain.strip().startswith("1") and rows[4].plain.strip().startswith("0")
    assert rows[-1].plain.split() == ["1", "4"]
    empty = line_chart([Series("r", [1, 2], [None, None])], 30, 6)
    assert any("no data yet" in r.plain for r in empty)


def test_heat_strip_shows_collapse_as_one_bright_row():
    collapsed = heat_strip([[1.0] * 8] * 4, 4, 5, 0.0, 1.0)
    assert [row.count(None) for row in collapsed] == [0, 4, 4, 4, 4]  # everything in the top bin
    assert all(cell == HEAT[-1] for cell in collapsed[0])
    spread = heat_strip([[0.0, 0.5, 1.0, 0.25]], 1, 4, 0.0, 1.0)
    assert sum(cell is not None for row in spread for cell in row) == 4


def test_tidy_starts_every_run_on_a_glyph():
    text = tidy(Text("15,360").append("   tokens/s ", "dim").append("1", "bold").append(" ", "reverse").append(" x"))
    runs = [segment.text for segment in text.render(Console())]
    assert all(run[0] != " " or not run.strip() for run in runs), runs
    assert "".join(runs).rstrip("\n") == "15,360   tokens/s 1  x"


def test_reward_spread_prefers_the_step_frame_over_samples():
    spread = RewardSpread()
    spread.add_sample(1, 0.5)
    spread.add_sample(1, 1.0)
    assert spread.partial and spread.rows[-1].rewards == [0.5, 1.0]
    spread.add_step(2, [0.0, 1.0, None, 0.5])
    spread.add_sample(2, 7.0)  # a subset: the step frame already gave all of them
    assert spread.rows[-1].rewards == [0.0, 1.0, 0.5] and spread.rows[-1].complete


class Host(App[None]):
    def compose(self) -> ComposeResult:
        yield ChartsView(id="charts")


def feed(view: ChartsView, steps: int) -> None:
    args = parse_args([])
    for s in range(1, steps + 1):
        view.book.append(s, flatten_step(step_frame(s, 0, args)))
        view.spread.add_step(s, [0.25 * (i % 5) for i in range(16)])


class Colored(Widget):
    DEFAULT_CSS = "Colored { width: 40; height: 8; color: red; background: blue; }"


class ColoredHost(App[None]):
    def compose(self) -> ComposeResult:
        yield Colored()


async def test_text_strips_draw_what_textual_draws_of_the_same_rows():
    """The main chart's strips (tui/widgets/text_strips.py) are the segments Textual's own path
    makes of the same rows as a renderable: the same colours, the same runs, on the widget's style."""
    host = ColoredHost()
    async with host.run_test(size=(60, 12)):
        widget = host.query_one(Colored)
        width, height = widget.content_size
        curves = [Series("r", list(range(30)), [i % 7 / 7 for i in range(30)]), Series("e", [0, 29], [0.2, 0.9])]
        cases = [
            line_chart(curves, width, height, right=[Series("l", list(range(30)), [(-1) ** i for i in range(30)])]),
            line_chart([Series("r", [1, 2], [None, None])], width, height),  # "no data yet", one style per row
            line_chart(curves, 5, height),  # too small: blank rows
            [tidy(Text("plain and ").append("bold", "bold")), Text("dim only", "dim"), Text(""),
             Text("dim row, a bold run, a red run", "dim", spans=[Span(9, 15, "bold"), Span(17, 22, "red")]),
             Text("overlapping runs", spans=[Span(0, 11, "bold"), Span(4, 16, "italic red")])],
        ]
        for rows in cases:
            textual = Visual.to_strips(widget, visualize(widget, Group(*rows)), width, height, widget.visual_style)
            ours = text_strips(rows, host.console, widget.visual_style.rich_style)
            assert [list(s) for s in ours] == [list(s) for s in textual]


async def test_charts_view_keys_window_move_zoom():
    app = Host()
    async with app.run_test(size=(120, 40)) as pilot:
        view = app.query_one(ChartsView)
        feed(view, 30)
        await pilot.pause(0.7)  # one redraw tick
        titles = [p.spec.title for p in view.query(ChartPanel)]
        assert "accuracy" in titles and "xml_format" in titles  # one chart per reward function
        reward = app.query_one("#chart-rewards-reward--total-", ChartPanel)
        assert reward.border_subtitle == "0.7859" and "30" in reward.plain()
        assert view.columns == 3
        heatmap = app.query_one(RewardHeatmap)
        await pilot.press("right")  # nothing focused yet: the first chart takes focus
        assert app.focused is heatmap
        await pilot.press("down")
        assert app.focused is view.panels()[1]
        await pilot.press("right", "down")
        assert app.focused is view.panels()[2 + view.columns]
        await pilot.press("w")
        assert view.settings.window == WINDOWS[1]
        await pilot.press("enter")
        assert app.screen.maximized is view.panels()[2 + view.columns]
        await pilot.pause(0.1)
        assert app.screen.maximized.size.height > 30
        await pilot.press("escape")
        assert app.screen.maximized is None
        view.settings.change(smoothing=0.0)
        view.settings_changed()
        assert "EMA 0" in str(view.query_one("#charts-bar").render())


async def test_a_group_added_from_a_dict_of_series_gets_its_charts():
    app = Host()
    async with app.run_test(size=(100, 30)) as pilot:
        view = app.query_one(ChartsView)
        evals = SeriesBook()
        view.add_group(dict_group("eval", []), evals)
        await pilot.pause(0.1)
        evals.append(10, {"accuracy": 0.4, "format": 0.9})
        evals.append(20, {"accuracy": 0.6, "format": 1.0})
        await pilot.pause(0.7)
        titles = [p.spec.title for p in view.query("#charts-group-eval ChartPanel").results(ChartPanel)]
        assert titles == ["accuracy", "format"]


async def test_a_hidden_view_draws_nothing():
    app = Host()
    async with app.run_test(size=(100, 30)) as pilot:
        view = app.query_one(ChartsView)
        view.display = False
        await pilot.pause(0.1)
        feed(view, 5)
        drawn = {p: p._key for p in view.query(ChartPanel)}
        await pilot.pause(0.7)
        assert all(p._key == key for p, key in drawn.items())
        view.display = True
        await pilot.pause(0.7)
        reward = app.query_one("#chart-rewards-reward--total-", ChartPanel)
        assert reward._key != drawn.get(reward)  # on screen again: mounted with its data and drawn


def test_step_frames_carry_no_unknown_struct_fields():
    # flatten_step walks the struct's fields: a new nested struct must be handled on purpose
    frame = step_frame(3, 0, parse_args([]))
    numeric = {n for n in m.Step.__struct_fields__ if isinstance(getattr(frame, n), (int, float, type(None)))}
    left_out = set(m.Step.__struct_fields__) - numeric - set(flatten_step(frame))
    # flattened into rewards/..., extra_metrics/..., clip_ratio/..., ranks/...; each completion's
    # reward goes to the RewardSpread
    assert left_out == {"rewards", "extra_metrics", "clip_ratio", "completion_rewards", "ranks"}


def test_several_ranks_and_logged_metrics_have_charts():
    frame = step_frame(3, 0, parse_args([]))
    frame.extra_metrics = {"mean_ids": 6.5}
    frame.ranks = [m.RankTiming(rank=r, generation_ms=100.0, training_ms=50.0 + r, all_reduce_ms=3.0) for r in range(2)]
    frame.slowest_rank, frame.all_reduce_bytes = 1, 4096
    row = flatten_step(frame)
    assert row["ranks/rank 1 ms"] == 151.0 and row["ranks/rank 0 all-reduce ms"] == 3.0
    assert row["extra_metrics/mean_ids"] == 6.5 and row["all_reduce_bytes"] == 4096
    charted = {key for group in STEP_GROUPS for panel in group.resolve(list(row)) for key, _ in panel.lines}
    assert set(row) - charted == {"num_tokens"}


def test_dynamic_samplings_metrics_have_charts():
    frame = step_frame(3, 0, parse_args([]))
    frame.extra_metrics = {"sampling/rounds": 2.0, "sampling/dropped_groups": 3.0, "sampling/generated_completions": 48.0}
    row = flatten_step(frame)
    titles = {panel.title for group in STEP_GROUPS for panel in group.resolve(list(row))}
    assert {"sampling/rounds", "sampling/dropped_groups", "sampling/generated_completions"} <= titles


async def test_a_group_without_data_is_not_shown():
    """A one-rank run never sends the "ranks" columns: no empty "ranks" group saying "no data yet"."""
    app = Host()
    async with app.run_test(size=(100, 30)) as pilot:
        view = app.query_one(ChartsView)
        feed(view, 3)
        await pilot.pause(0.7)
        assert not app.query_one("#charts-group-ranks").display and not app.query_one("#charts-title-ranks").display
        assert app.query_one("#charts-group-rewards").display and not view.query("#charts-group-ranks ChartPanel")


def test_a_live_change_is_a_tick_and_a_short_label_on_the_x_axis_at_its_step():
    from grpo_tui.protocol import messages as m
    from grpo_tui.tui.plot import AXIS_WIDTH, Series, line_chart
    from grpo_tui.tui.state import RunState

    state = RunState(clock=lambda: 0.0)
    for step in range(1, 11):
        state.apply(m.Step(step=step, epoch=0, reward=step / 10, loss=1 / step))
    state.apply(m.SettingChanged(step=6, key="training.learning_rate", old=1e-5, new=5e-6))
    state.apply(m.SettingChanged(step=9, key="rewards[1].weight", old=1.0, new=0.5))
    assert state.book.marks == [(6, "lr"), (9, "w1")]
    rows = line_chart([Series("reward", list(range(1, 11)), [s / 10 for s in range(1, 11)])], 48, 8,
                      marks=state.book.marks)
    axis = rows[-1].plain
    col = AXIS_WIDTH + round(5 / 9 * (2 * (48 - AXIS_WIDTH) - 1)) // 2
    assert axis[col:col + 3] == "▲lr" and "▲w1" in axis
    assert line_chart([Series("r", [1, 2], [0.1, 0.2])], 48, 8, marks=[(7, "lr")])[-1].plain.count("▲") == 0  # off the chart


def test_the_prompt_pool_strip_stacks_each_steps_shares_bottom_up():
    from grpo_tui.tui.widgets.prompt_pool_strip import STATES, stacked

    grid = stacked([(2.0, 2.0, 0.0, 0.0), (0.0, 1.0, 3.0, 0.0)], 2, 4)
    colour = {state: c for state, _, c in STATES}
    assert [row[0] for row in grid] == [colour["learning"]] * 2 + [colour["too_hard"]] * 2
    assert [row[1] for row in grid] == [colour["solved"]] * 3 + [colour["learning"]]


async def test_a_curriculum_run_gets_its_pool_strip_and_the_equal_reward_chart_against_uniform():
    from grpo_tui.tui.widgets.prompt_pool_strip import PromptPoolStrip

    app = Host()
    async with app.run_test(size=(120, 60)) as pilot:
        view = app.query_one(ChartsView)
        feed(view, 3)  # no curriculum: neither the strip nor its charts
        await pilot.pause(0.7)
        strip = app.query_one(PromptPoolStrip)
        assert not strip.display and not list(view.query("#charts-group-curriculum ChartPanel"))
        args = parse_args([])
        for s in range(4, 12):
            frame = step_frame(s, 0, args)
            frame.extra_metrics.update({"curriculum/unseen": 60.0 - 5 * s, "curriculum/too_hard": 2.0 * s,
                                        "curriculum/learning": 3.0 * s, "curriculum/solved": 0.0,
                                        "curriculum/revisits": 1.0, "curriculum/uniform_flat_share": 0.3})
            view.book.append(s, flatten_step(frame))
        await pilot.pause(0.8)
        assert strip.display and strip in view.panels()
        assert strip.border_subtitle == "step 11: 22 too hard · 33 learning · 0 solved · 5 unseen"
        titles = [p.spec.title for p in view.query("#charts-group-curriculum ChartPanel").results(ChartPanel)]
        assert titles == ["equal-reward groups vs uniform", "prompts by state", "revisits per step"]
        await pilot.press("right")  # the strip takes focus in its turn, after the heatmap
        await pilot.press("down")
        assert app.focused is strip
        assert "too hard" in strip.plain() and "11" in strip.plain()


async def test_an_async_run_gets_its_busy_timeline_and_staleness_charts():
    from grpo_tui.tui.widgets.busy_timeline_strip import BusyTimelineStrip

    app = Host()
    async with app.run_test(size=(120, 60)) as pilot:
        view = app.query_one(ChartsView)
        feed(view, 3)  # a synchronous run: neither the strip nor the group
        await pilot.pause(0.7)
        strip = app.query_one(BusyTimelineStrip)
        assert not strip.display and not list(view.query("#charts-group-asynchronous ChartPanel"))
        args = parse_args([])
        for s in range(4, 12):
            frame = step_frame(s, 0, args)
            frame.extra_metrics.update({"async/staleness_mean": 1.0, "async/staleness_max": 1.0, "async/is_clipped": 0.02,
                                        "async/queue_depth": 0.0, "async/generator_busy": 0.95,
                                        "async/learner_busy": 0.25, "async/wait_ms": 300.0,
                                        "sampling/importance_sampling_ratio/mean": 1.01})
            view.book.append(s, flatten_step(frame))
        await pilot.pause(0.8)
        assert strip.display and strip in view.panels()
        assert strip.border_subtitle == "step 11: gen 95% · learn 25%"
        titles = [p.spec.title for p in view.query("#charts-group-asynchronous ChartPanel").results(ChartPanel)]
        assert titles[:2] == ["staleness (steps behind)", "IS clipped or masked"] and "busy share" in titles
        more = [p.spec.title for p in view.query("#charts-group-more-step-metrics ChartPanel").results(ChartPanel)]
        assert not any("async" in t or "importance" in t for t in more)  # charted once, in their group
        assert "gen" in strip.plain() and "learn" in strip.plain()
