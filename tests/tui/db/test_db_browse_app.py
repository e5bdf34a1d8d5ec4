"""The Database view driven like a user would, through ``grpo-tui browse``'s App on a fixture store."""

import csv
import json

from rich.console import Console
from textual.widgets import Input, Select, Static

from grpo_tui.tui.browse import BrowseApp
from grpo_tui.tui.screens.database_compare import DatabaseCompareScreen
from grpo_tui.tui.screens.export_dialog import ExportDialog
from grpo_tui.tui.widgets.database_compare_chart import DatabaseCompareChart
from grpo_tui.tui.widgets.database_generation_detail import DatabaseGenerationDetail, render_detail
from grpo_tui.tui.widgets.database_generations_pane import DatabaseGenerationsPane
from grpo_tui.tui.widgets.database_generations_table import DatabaseGenerationsTable
from grpo_tui.tui.widgets.database_runs_table import DatabaseRunsTable
from grpo_tui.tui.widgets.database_steps_table import DatabaseStepsTable
from grpo_tui.tui.widgets.database_view import DatabaseView

from tests.helpers.pilot import screen_text, settle

from .make_store import RunSpec, add_steps, build_store

SIZE = (150, 45)


def view(app) -> DatabaseView:
    return app.query_one(DatabaseView)


def rows(app):
    return app.query_one(DatabaseGenerationsTable).rows_data


def status(app) -> str:
    return str(app.query_one("#db-status", Static).render())


def summary(app) -> str:
    return str(app.query_one("#db-filter-summary", Static).render())


async def open_run_generations(pilot, run_row: int = 1) -> None:
    """From the runs list: open a run (enter) and all its generations (a)."""
    await settle(pilot)
    for _ in range(run_row):
        await pilot.press("down")
    await pilot.press("enter")
    await settle(pilot)
    await pilot.press("a")
    await settle(pilot)


async def test_runs_steps_generations_and_back(store_path):
    app = BrowseApp(str(store_path))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert [r.name for r in app.query_one(DatabaseRunsTable).rows_data] == ["gsm8k-lora", "gsm8k-qwen"]
        await pilot.press("down", "enter")
        await settle(pilot)
        steps = app.query_one(DatabaseStepsTable)
        assert view(app).level == "steps" and len(steps.rows_data) == 12
        await pilot.press("down", "down", "enter")  # step 3
        await settle(pilot)
        assert view(app).level == "generations"
        assert {(r.step, r.run_id) for r in rows(app)} == {(3, 1)} and len(rows(app)) == 8
        assert "step 3" in summary(app) and "rows 1–8 of 8" in status(app)
        await pilot.press("escape")
        assert view(app).level == "steps"
        await pilot.press("escape")
        assert view(app).level == "runs"


async def test_a_steps_cell_at_120_columns_shows_every_digit_that_makes_its_value(tmp_path):
    """A loss of 6.24e-08 read as 6.24, or -9.88e-09 as -9.8, is another number: never shown so."""
    import sqlite3

    path = build_store(tmp_path / "tiny.db")
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE steps SET loss = 6.24e-08, kl = -9.88e-09")
    app = BrowseApp(str(path), run_id=1)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        text = screen_text(app)
        assert text.count("6.24e-08") >= 4 and text.count("-9.88e-09") >= 4, text


async def test_steps_sort_by_metric(store_path):
    app = BrowseApp(str(store_path), run_id=1)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        steps = app.query_one(DatabaseStepsTable)
        assert view(app).level == "steps"
        await pilot.press("right", "right", "o")  # third column: loss
        losses = [r["loss"] for r in steps.rows_data]
        assert steps.sort_column == "loss" and losses == sorted(losses, reverse=True)
        await pilot.press("o")
        assert [r["loss"] for r in steps.rows_data] == sorted(losses)
        await pilot.click(DatabaseStepsTable, offset=(2, 0))  # the "step" header
        assert steps.sort_column == "step"


async def test_pages_next_and_previous(store_path):
    app = BrowseApp(str(store_path))
    async with app.run_test(size=SIZE) as pilot:
        await open_run_generations(pilot)
        first = [r.id for r in rows(app)]
        assert len(first) == 50 and "page 1 · rows 1–50 of 96" in status(app)
        await pilot.press("n")
        await settle(pilot)
        second = [r.id for r in rows(app)]
        assert len(second) == 46 and not set(first) & set(second) and "page 2 · rows 51–96 of 96" in status(app)
        await pilot.press("n")  # no page 3
        await settle(pilot)
        assert [r.id for r in rows(app)] == second
        await pilot.press("b")
        await settle(pilot)
        assert [r.id for r in rows(app)] == first


async def test_search_detail_and_inert_text(store_path):
    app = BrowseApp(str(store_path))
    async with app.run_test(size=SIZE) as pilot:
        await open_run_generations(pilot)
        await pilot.press("slash")
        assert app.focused.id == "db-search"
        await pilot.press(*"pwned", "enter")
        await settle(pilot)
        (row,) = rows(app)
        assert "search 'pwned'" in summary(app)
        detail = app.query_one(DatabaseGenerationDetail)
        assert detail.detail is not None and detail.detail.row.id == row.id
        await pilot.press("enter")
        assert app.query_one("#db-gens-pane").has_class("detail-max") and app.focused is detail
        console = Console(width=100, record=True, force_terminal=True)
        console.print(render_detail(detail.detail))
        shown = console.export_text()
        assert "[bold red]not markup[/]" in shown and "\x1b" not in shown and "\x07" not in shown
        assert "── prompt" in shown and "── completion" in shown and "correctness" in shown
        completion = render_detail(detail.detail, "fts: markup OR answ*").renderables[-1]
        marked = [completion.plain[s.start:s.end] for s in completion.spans if s.style == "black on yellow"]
        assert marked == ["markup", "answer"]  # search words are highlighted where they occur
        await pilot.press("escape")
        assert not app.query_one("#db-gens-pane").has_class("detail-max")


async def test_bad_search_shows_a_friendly_message(store_path):
    app = BrowseApp(str(store_path))
    async with app.run_test(size=SIZE) as pilot:
        await open_run_generations(pilot)
        await pilot.press("slash", *'fts: "open', "enter")
        await settle(pilot)
        assert "Search not understood" in status(app)
        assert app.query_one("#db-status").has_class("error")


async def test_pasted_text_is_found_and_a_long_query_never_hides_the_table(store_path):
    app = BrowseApp(str(store_path))
    async with app.run_test(size=SIZE) as pilot:
        await open_run_generations(pilot)
        await pilot.press("slash", *"red?", "enter")  # "?" is FTS5 syntax: before, "Search not understood"
        await settle(pilot)
        assert len(rows(app)) == 1 and "Search not understood" not in status(app)
        table = app.query_one(DatabaseGenerationsTable)
        height = table.region.height
        search = app.query_one("#db-search", Input)
        search.focus()
        search.value = " ".join(f"word{i}" for i in range(3000))
        await pilot.press("enter")
        await settle(pilot)
        assert rows(app) == [] and "no generation matches" in status(app), status(app)
        assert table.region.height == height > 10  # the summary stays short, the table keeps its room
        assert "…" in summary(app) and len(summary(app)) < 300


async def set_field(pilot, field_id: str, value: str) -> None:
    field = pilot.app.query_one(f"#{field_id}", Input)
    field.focus()
    field.value = value
    await pilot.press("enter")
    await settle(pilot)


async def test_every_filter_from_the_form_and_clear(store_path):
    app = BrowseApp(str(store_path))
    async with app.run_test(size=SIZE) as pilot:
        await open_run_generations(pilot)
        await pilot.press("f")
        assert app.query_one("#db-filter").has_class("open") and app.focused.id == "f-step_min"
        await set_field(pilot, "f-step_min", "4")
        await set_field(pilot, "f-step_max", "9")
        assert {r.step for r in rows(app)} == set(range(4, 10)) and "steps 4–9" in summary(app)
        await set_field(pilot, "f-reward_min", "0.5")
        await set_field(pilot, "f-reward_max", "1.4")
        assert rows(app) and all(0.5 <= r.reward <= 1.4 for r in rows(app)) and "reward 0.5–1.4" in summary(app)
        await set_field(pilot, "f-reward_min", "")
        await set_field(pilot, "f-reward_max", "")
        for select_id, value, check in (
            ("f-finish_reason", "stop", lambda r: r.finish_reason == "stop"),
            ("f-tool_status", "error", lambda r: any(s != "ok" for s in r.tool_statuses)),
            ("f-has_thinking", "no", lambda r: not r.has_thinking),
        ):
            app.query_one(f"#{select_id}", Select).value = value
            await settle(pilot)
            assert rows(app) and all(check(r) for r in rows(app)), select_id
        assert "finish stop · a failed tool call · without thinking" in summary(app)
        await set_field(pilot, "f-prompt_index", "1")
        assert rows(app) and {r.prompt_index for r in rows(app)} == {1}
        await set_field(pilot, "f-tool_name", "calculator")
        assert rows(app) and "tool 'calculator'" in summary(app)
        await set_field(pilot, "f-tool_name", "no-such-tool")
        assert rows(app) == [] and "tool 'no-such-tool'" in summary(app)
        view(app).query_one("#db-gens").focus()
        await pilot.press("x")
        await settle(pilot)
        assert "no filter" in summary(app) and len(rows(app)) == 50
        assert app.query_one("#f-step_min", Input).value == ""
        assert app.query_one("#f-tool_name", Input).value == ""
        assert app.query_one("#f-finish_reason", Select).value is Select.NULL


async def test_a_filter_value_that_is_not_a_number_stays_said_after_the_page_loads(store_path):
    """The form reads "-" as no number: the bottom line says so, and the page the (other) filters
    brought back does not replace the sentence with its key hints; a form read cleanly clears it."""
    app = BrowseApp(str(store_path))
    async with app.run_test(size=SIZE) as pilot:
        await open_run_generations(pilot)
        await pilot.press("f")
        await set_field(pilot, "f-step_min", "4")
        await set_field(pilot, "f-reward_min", "-")
        assert rows(app) and all(r.step >= 4 for r in rows(app)) and "page 1" in status(app)  # the step filter applies
        assert "ignored (not a number): reward_min" in status(app)
        assert app.query_one("#db-status").has_class("error")
        await set_field(pilot, "f-reward_min", "")
        assert "ignored" not in status(app) and "page 1" in status(app)
        assert not app.query_one("#db-status").has_class("error")
        await set_field(pilot, "f-reward_min", "-")
        assert "ignored (not a number)" in status(app)
        view(app).query_one("#db-gens").focus()
        await pilot.press("x")  # clearing the filter clears what it said
        await settle(pilot)
        assert "ignored" not in status(app) and "no filter" in summary(app)


async def test_sort_by_reward_and_group_view(store_path):
    app = BrowseApp(str(store_path))
    async with app.run_test(size=SIZE) as pilot:
        await open_run_generations(pilot)
        await pilot.press("o")  # step ↑
        await settle(pilot)
        assert rows(app)[0].step == 1
        await pilot.press("o")  # reward ↓
        await settle(pilot)
        rewards = [r.reward for r in rows(app)]
        assert rewards == sorted(rewards, reverse=True) and "sorted by reward ↓" in summary(app)
        await pilot.press("down", "down", "g")
        await settle(pilot)
        group = rows(app)
        assert len(group) == 4 and len({(r.step, r.prompt_index) for r in group}) == 1
        assert "group of prompt" in summary(app)
        await pilot.press("escape")  # back to the sorted list
        await settle(pilot)
        assert "sorted by reward ↓" in summary(app) and len(rows(app)) == 50


async def test_export_jsonl_and_csv(store_path, tmp_path):
    app = BrowseApp(str(store_path))
    async with app.run_test(size=SIZE) as pilot:
        await open_run_generations(pilot)
        await pilot.press("slash", *"banana", "enter")
        await settle(pilot)
        expected = app.query_one(DatabaseGenerationsPane).total
        assert expected and expected > 0
        await pilot.press("e")
        await pilot.pause()
        dialog = app.screen
        assert isinstance(dialog, ExportDialog)
        dialog.query_one("#export-path", Input).value = str(tmp_path / "banana.jsonl")
        await pilot.click("#export-go")
        await settle(pilot)
        assert not isinstance(app.screen, ExportDialog)
        lines = [json.loads(x) for x in (tmp_path / "banana.jsonl").read_text().splitlines()]
        assert len(lines) == expected and all(x["run_id"] == 1 for x in lines)
        assert all("banana" in (x["prompt"] + x["completion"] + (x["thinking"] or "")) for x in lines)

        await pilot.press("e")
        await pilot.pause()
        app.screen.query_one("#export-format", Select).value = "csv"
        await pilot.pause()
        path_input = app.screen.query_one("#export-path", Input)
        assert path_input.value.endswith(".csv")
        path_input.value = str(tmp_path / "banana.csv")
        await pilot.click("#export-go")
        await settle(pilot)
        with open(tmp_path / "banana.csv", newline="") as fh:
            assert [int(r["id"]) for r in csv.DictReader(fh)] == [x["id"] for x in lines]


async def test_export_asks_before_overwriting(store_path, tmp_path):
    target = tmp_path / "keep.jsonl"
    target.write_text("precious\n")
    app = BrowseApp(str(store_path))
    async with app.run_test(size=SIZE) as pilot:
        await open_run_generations(pilot)
        await pilot.press("e")
        await pilot.pause()
        app.screen.query_one("#export-path", Input).value = str(target)
        await pilot.click("#export-go")
        await settle(pilot)
        assert isinstance(app.screen, ExportDialog) and target.read_text() == "precious\n"
        assert "exists" in str(app.screen.query_one("#export-message", Static).render())
        # Textual ignores a click on a button still showing its 0.2 s press effect; a person
        # cannot confirm that fast, a test can (a flaky failure in CI).
        while app.screen.query_one("#export-go").has_class("-active"):
            await pilot.pause(0.05)
        await pilot.click("#export-go")
        await settle(pilot)
        assert len(target.read_text().splitlines()) == 96


async def test_compare_two_runs_and_another_store(store_path, tmp_path):
    other = build_store(tmp_path / "other.db", [RunSpec("long-run", steps=20)])
    app = BrowseApp(str(store_path))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("c")
        await pilot.pause()
        assert isinstance(app.screen, DatabaseCompareScreen)
        chart = app.screen.query_one(DatabaseCompareChart)
        assert [(label.split(" (")[0], len(curve)) for label, curve in chart.series] == [
            ("gsm8k-lora", 4), ("gsm8k-qwen", 12)]
        other_input = app.screen.query_one("#db-compare-other", Input)
        other_input.focus()
        other_input.value = str(other)
        await pilot.press("enter")
        await pilot.pause()
        assert [len(curve) for _, curve in chart.series] == [4, 20]
        assert chart.series[1][0].startswith("other.db › long-run")
        other_input.value = str(tmp_path / "nope.db")
        await pilot.press("enter")
        await pilot.pause()
        assert "no such file" in str(app.screen.query_one("#db-compare-message", Static).render())
        await pilot.press("escape")
        assert isinstance(app.screen.query_one(DatabaseView), DatabaseView)


async def test_live_refresh_on_key_and_timer(store_path, writer):
    app = BrowseApp(str(store_path), run_id=2, refresh_seconds=0.3)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        steps = app.query_one(DatabaseStepsTable)
        assert len(steps.rows_data) == 4
        add_steps(writer, 2, RunSpec("gsm8k-lora"), 5, 2)  # the worker writes two more steps
        await pilot.press("f5")
        await settle(pilot)
        assert len(steps.rows_data) == 6
        add_steps(writer, 2, RunSpec("gsm8k-lora"), 7, 1)
        for _ in range(50):  # no key pressed: the slow timer picks the new step up
            await pilot.pause(0.1)
            await settle(pilot, rounds=1)
            if len(steps.rows_data) == 7:
                break
        assert len(steps.rows_data) == 7
        assert app.query_one(DatabaseRunsTable).rows_data[0].steps == 7


async def test_j_and_k_move_through_the_database_tables(store_path):
    app = BrowseApp(str(store_path))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        runs = app.query_one(DatabaseRunsTable)
        await pilot.press("j")
        assert runs.cursor_row == 1
        await pilot.press("k")
        assert runs.cursor_row == 0
        await pilot.press("j", "enter")
        await settle(pilot)
        steps = app.query_one(DatabaseStepsTable)
        await pilot.press("G")
        assert view(app).level == "steps" and steps.cursor_row == len(steps.rows_data) - 1
