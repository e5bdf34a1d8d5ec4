"""``grpo-tui browse`` on mlx-node's output store: its runs, steps, generations and tool calls,
browsed and searched like one of ours, the file itself never written."""

import hashlib

from textual.widgets import Static

from grpo_tui.tui.browse import browsable
from grpo_tui.tui.widgets.database_generations_table import DatabaseGenerationsTable
from grpo_tui.tui.widgets.database_runs_table import DatabaseRunsTable
from grpo_tui.tui.widgets.database_steps_table import DatabaseStepsTable
from grpo_tui.tui.widgets.database_view import DatabaseView

from tests.helpers.pilot import settle

from .mlx_node_store import build_mlx_node_store

SIZE = (150, 45)


def digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


async def test_an_mlx_node_store_is_browsed_and_searched_and_never_written(tmp_path):
    store = build_mlx_node_store(tmp_path / "outputs.db")
    before = digest(store)
    with browsable(str(store)) as app:
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            assert "mlx-node store" in app.sub_title
            [run] = app.query_one(DatabaseRunsTable).rows_data
            assert run.name == "gsm8k-first (qwen3-gsm8k)" and run.status == "completed"  # its runName, then its id
            await pilot.press("enter")
            await settle(pilot)
            steps = app.query_one(DatabaseStepsTable).rows_data
            assert [s["step"] for s in steps] == [1, 2] and [s["reward"] for s in steps] == [0.25, 0.5]
            await pilot.press("a")  # every generation of the run
            await settle(pilot)
            generations = app.query_one(DatabaseGenerationsTable).rows_data
            assert len(generations) == 8
            assert [g.tool_statuses for g in generations].count(("ok",)) == 2  # one call a step
            assert {g.finish_reason for g in generations} == {"stop", "length"}  # mlx-node's "eos" is our "stop"
            await pilot.press("slash", *"pineapple", "enter")
            await settle(pilot)
            [found] = app.query_one(DatabaseGenerationsTable).rows_data
            assert found.step == 2 and "pineapple" in found.first_line
            assert "search 'pineapple'" in str(app.query_one("#db-filter-summary", Static).render())
            assert app.query_one(DatabaseView).level == "generations"
    assert digest(store) == before


def test_doctor_on_an_mlx_node_store_says_what_it_is(tmp_path):
    """Issue 57.12: it said the folder's config or outputs.db was missing."""
    import subprocess
    import sys

    store = build_mlx_node_store(tmp_path / "outputs.db")
    done = subprocess.run([sys.executable, "-m", "grpo_tui.tui.cli", "doctor", str(tmp_path)], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr == (f"grpo-tui: {store} is mlx-node's store, not a grpo-tui run's: the doctor replays grpo-tui "
                           f"runs; grpo-tui browse {store} opens it.\n")
