"""The curriculum's prompts in the Database view (docs/curriculum.md): the form's "prompt state"
filter shows the groups whose prompt was in that state after the visit, ``h`` opens every visit of
the highlighted generation's prompt, and a store from before the table says so."""

import sqlite3

import pytest
from textual.widgets import Select

from grpo_tui.tui.browse import BrowseApp
from grpo_tui.tui.db import GenFilter, open_readonly
from grpo_tui.tui.db.queries import QueryError, count_generations, generations_page
from grpo_tui.tui.widgets.database_generations_table import DatabaseGenerationsTable

from .make_store import build_store
from tests.helpers.pilot import settle as _settle

STATES = ("too_hard", "learning", "solved")


def _visits(path) -> None:
    """Each group visited: its prompt row is its prompt_index, its state by (step + prompt_index) mod 3."""
    with sqlite3.connect(path) as c:
        groups = c.execute("SELECT DISTINCT run_id, step, prompt_index FROM generations").fetchall()
        c.executemany("INSERT INTO prompt_visits (run_id, step, prompt_index, prompt_row, passed, pass_rate, state, "
                      "visits, created_at) VALUES (?, ?, ?, ?, 0.5, 0.5, ?, 1, 0)",
                      [(r, s, p, p, STATES[(s + p) % 3]) for r, s, p in groups])


def test_the_filter_selects_a_state_and_the_history_one_prompts_visits(store_path, conn):
    _visits(store_path)
    total = count_generations(conn, GenFilter(run_id=1))
    counts = [count_generations(conn, GenFilter(run_id=1, prompt_state=s)) for s in STATES]
    assert all(counts) and sum(counts) == total
    assert {(r.step + r.prompt_index) % 3 for r in generations_page(conn, GenFilter(run_id=1, prompt_state="solved")).rows} == {2}
    history = generations_page(conn, GenFilter(run_id=1, history=(3, 1), sort="step", descending=False)).rows
    assert {r.prompt_index for r in history} == {1} and len({r.step for r in history}) > 1
    assert [r.step for r in history] == sorted(r.step for r in history)
    assert "prompts solved" in GenFilter(prompt_state="solved").describe()
    assert "every visit of the prompt of step 3 #1" in GenFilter(history=(3, 1)).describe()


def test_a_store_from_before_the_table_says_so(tmp_path):
    path = build_store(tmp_path / "outputs.db")
    with sqlite3.connect(path) as c:
        c.executescript("DROP VIEW prompts; DROP TABLE prompt_visits;")
    with pytest.raises(QueryError, match="written before the curriculum"):
        generations_page(open_readonly(path), GenFilter(prompt_state="solved"))


async def test_the_forms_prompt_state_select_and_the_history_key(store_path):
    _visits(store_path)
    app = BrowseApp(str(store_path))
    async with app.run_test(size=(150, 45)) as pilot:
        await _settle(pilot)
        for key in ("down", "enter", "a"):  # the first run, all its generations
            await pilot.press(key)
            await _settle(pilot)
        await pilot.press("f")
        app.query_one("#f-prompt_state", Select).value = "learning"
        await _settle(pilot)
        rows = app.query_one(DatabaseGenerationsTable).rows_data
        assert rows and {(r.step + r.prompt_index) % 3 for r in rows} == {1}
        assert "prompts being learned" in str(app.query_one("#db-filter-summary").render())
        app.query_one(DatabaseGenerationsTable).focus()
        picked = app.query_one(DatabaseGenerationsTable).rows_data[0]
        await pilot.press("h")
        await _settle(pilot)
        rows = app.query_one(DatabaseGenerationsTable).rows_data
        assert rows and {r.prompt_index for r in rows} == {picked.prompt_index} and len({r.step for r in rows}) > 1
        assert f"every visit of the prompt of step {picked.step} #{picked.prompt_index}" in str(
            app.query_one("#db-filter-summary").render())
        await pilot.press("escape")  # back to the filter it came from
        await _settle(pilot)
        assert "prompts being learned" in str(app.query_one("#db-filter-summary").render())
