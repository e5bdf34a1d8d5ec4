"""Compare runs in the dashboard (docs/steering.md, "Compare runs"): ``C`` picks runs beside this one,
the main chart and the Charts tab draw each in its colour with a legend, a live run's new steps come
in, and unticking a run takes it off. ``attach --compare`` names a folder that is not there."""

from __future__ import annotations

import subprocess
import sys

from textual.content import Content
from textual.widget import Widget

from grpo_tui.tui.compared_runs import RUN_STYLES
from grpo_tui.tui.screens.compare_picker import ComparePickerScreen
from grpo_tui.tui.widgets.chart_panel import ChartPanel
from grpo_tui.tui.widgets.reward_chart import RewardChart
from tests.helpers.run_folders import add_steps, write_run

from .conftest import build_app, wait_until
from .scenarios import RUN, running


def title(widget: Widget) -> str:
    return Content.from_markup(str(widget.border_title)).plain


async def test_c_compares_runs_beside_this_one_on_every_chart(tmp_path):
    write_run(tmp_path / "alpha", "alpha", [0.1 * i for i in range(10)])
    write_run(tmp_path / "beta", "beta", [0.5] * 30, temperature=0.7)
    app = build_app(tmp_path / "this", *RUN)
    async with app.run_test(size=(160, 48)) as pilot:
        await running(pilot)
        await pilot.press("C")
        await wait_until(pilot, lambda: isinstance(app.screen, ComparePickerScreen))
        picker = app.screen
        assert [folder.name for folder, _ in picker.rows] == ["alpha", "beta"]
        assert "done · step 10/10" in picker.rows[0][1]
        await pilot.press("space", "down", "space", "enter")
        compared = app.dashboard.compared
        await wait_until(pilot, lambda: len(compared.runs) == 2)
        assert [(r.name, r.style, len(r.book.steps)) for r in compared.runs] == [
            ("alpha", RUN_STYLES[0], 10), ("beta", RUN_STYLES[1], 30)]
        chart = app.query_one(RewardChart)
        await wait_until(pilot, lambda: chart.up_to_date)
        assert "reward per run · ■ this run · ■ alpha · ■ beta" in title(chart)
        # beta's 30 steps widen the x axis past this run's 24: aligned by step
        assert chart.plain().splitlines()[-1].split() == ["1", "30"]

        await pilot.press("5")  # the Charts tab: the same runs over its step charts
        panel = app.query_one("#chart-rewards-reward--total-", ChartPanel)
        await wait_until(pilot, lambda: not panel.stale)
        assert "■ this ■ alpha ■ beta" in title(panel)

        add_steps(tmp_path / "alpha", [0.9] * 3)  # alpha goes on (a live run): read at the next poll
        await wait_until(pilot, lambda: compared.runs[0].last_step == 13, timeout=10)

        await pilot.press("C")
        await wait_until(pilot, lambda: isinstance(app.screen, ComparePickerScreen))
        await pilot.press("space", "enter")  # alpha unticked
        await wait_until(pilot, lambda: [r.name for r in compared.runs] == ["beta"])
        assert compared.runs[0].style == RUN_STYLES[1]  # beta keeps its colour
        await pilot.press("C")
        await wait_until(pilot, lambda: isinstance(app.screen, ComparePickerScreen))
        await pilot.press("escape")
        await wait_until(pilot, lambda: not isinstance(app.screen, ComparePickerScreen))
        assert [r.name for r in compared.runs] == ["beta"]


def test_attach_compare_names_the_folder_that_is_not_there(tmp_path):
    run = write_run(tmp_path / "run", "run", [0.1, 0.2])
    out = subprocess.run([sys.executable, "-m", "grpo_tui.tui.cli", "attach", str(run), "--compare",
                          str(tmp_path / "nope")], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.strip() == (f"grpo-tui: --compare {tmp_path / 'nope'}: no such folder; name a run's output "
                                  "folder (`grpo-tui ls` lists runs).")
