"""Dynamic sampling's dropped generations in the Database view: the form's "sampling" filter shows
the dropped ones or the trained ones; a store from before the column says so instead of failing."""

import sqlite3

import pytest
from textual.widgets import Select
from textual.worker import WorkerCancelled

from grpo_tui.tui.browse import BrowseApp
from grpo_tui.tui.db import GenFilter, open_readonly
from grpo_tui.tui.db.filters import where
from grpo_tui.tui.db.queries import QueryError, count_generations, generations_page
from grpo_tui.tui.widgets.database_generations_table import DatabaseGenerationsTable

from .make_store import build_store


def detail_text(conn, gid: int) -> str:
    """What the Database tab's detail shows of generation ``gid``."""
    from rich.console import Console

    from grpo_tui.tui.db.queries import generation
    from grpo_tui.tui.widgets.database_generation_detail import render_detail

    console = Console(width=200, record=True)
    console.print(render_detail(generation(conn, gid)))
    return console.export_text()


def _mark_even_steps_dropped(path) -> None:
    with sqlite3.connect(path) as c:
        c.execute("UPDATE generations SET dropped = 1 WHERE step % 2 = 0")


def test_the_filter_selects_dropped_or_trained(store_path, conn):
    _mark_even_steps_dropped(store_path)
    total = count_generations(conn, GenFilter(run_id=1))
    dropped = count_generations(conn, GenFilter(run_id=1, dropped=True))
    assert 0 < dropped < total and count_generations(conn, GenFilter(run_id=1, dropped=False)) == total - dropped
    assert {r.step % 2 for r in generations_page(conn, GenFilter(run_id=1, dropped=True)).rows} == {0}
    assert "dropped (equal rewards)" in GenFilter(dropped=True).describe()
    assert "trained on" in GenFilter(dropped=False).describe()
    assert where(GenFilter(dropped=True)) == ("g.dropped = ?", [1])


def test_a_store_from_before_the_column_says_so(tmp_path):
    path = build_store(tmp_path / "outputs.db")
    with sqlite3.connect(path) as c:
        c.execute("ALTER TABLE generations DROP COLUMN dropped")
    c = open_readonly(path)
    with pytest.raises(QueryError, match="written before dynamic sampling"):
        generations_page(c, GenFilter(dropped=True))
    assert generations_page(c, GenFilter()).rows  # no filter: reads as before


async def _settle(pilot, rounds: int = 4) -> None:
    for _ in range(rounds):
        try:
            await pilot.app.workers.wait_for_complete()
        except WorkerCancelled:  # a query replaced by a newer one
            continue
        finally:
            await pilot.pause()


async def test_the_forms_sampling_select(store_path):
    _mark_even_steps_dropped(store_path)
    app = BrowseApp(str(store_path))
    async with app.run_test(size=(150, 45)) as pilot:
        await _settle(pilot)
        for key in ("down", "enter", "a"):  # the first run, all its generations
            await pilot.press(key)
            await _settle(pilot)
        await pilot.press("f")
        for value, parity, words in (("dropped", 0, "dropped (equal rewards)"), ("trained", 1, "trained on")):
            app.query_one("#f-dropped", Select).value = value
            await _settle(pilot)
            rows = app.query_one(DatabaseGenerationsTable).rows_data
            assert rows and {r.step % 2 for r in rows} == {parity}
            assert words in str(app.query_one("#db-filter-summary").render())


def test_the_detail_says_a_generation_was_dropped(store_path, conn):

    _mark_even_steps_dropped(store_path)
    ids = {step: gid for gid, step in conn.execute("SELECT id, step FROM generations WHERE run_id = 1")}

    def text(gid: int) -> str:
        return detail_text(conn, gid)

    assert "dropped: its group's rewards were all equal" in text(ids[2])
    assert "dropped" not in text(ids[3])


def test_the_detail_says_how_stale_an_async_generation_was(store_path, conn):
    """[async]: a generation sampled by older weights than its step's says which (docs/async.md)."""

    with sqlite3.connect(store_path) as c:
        c.execute("UPDATE generations SET policy_step = step - 3 WHERE step % 2 = 0")
    ids = {step: gid for gid, step in conn.execute("SELECT id, step FROM generations WHERE run_id = 1")}

    def text(gid: int) -> str:
        return detail_text(conn, gid)

    assert "sampled by step 1's weights, 2 behind ([async])" in text(ids[4])
    assert "sampled by" not in text(ids[3])
