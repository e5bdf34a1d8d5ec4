"""The dashboard at the three terminal sizes users run it in: 80x24, 120x40 and 200x50.

Each state is reached against the fake worker, with a run store built beforehand (the fake
worker announces ``OUTPUT_DIR/outputs.db`` but writes none), so the Database tab has steps to show.
Shared by test_snapshot_sizes.py and screenshots/make.py.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from grpo_tui.tui.widgets.charts_view import ChartsView
from grpo_tui.tui.widgets.database_steps_table import DatabaseStepsTable
from grpo_tui.tui.widgets.database_view import DatabaseView

from .db.make_store import RunSpec, build_store
from .conftest import wait_until
from .scenarios import RUN, running

SIZES: dict[str, tuple[int, int]] = {"80x24": (80, 24), "120x40": (120, 40), "200x50": (200, 50)}
# every completion of a step in sample frames: the Charts tab's distribution has all of them
OPTIONS = RUN


def make_store(folder: Path) -> None:
    build_store(folder / "outputs.db", [RunSpec("fake-run", steps=24, status="running")])


async def database(pilot) -> None:  # type: ignore[no-untyped-def]
    await running(pilot)
    await pilot.press("4")
    view = pilot.app.query_one(DatabaseView)
    table = view.query_one(DatabaseStepsTable)
    await wait_until(pilot, lambda: view.level == "steps" and len(table.rows_data) == 24 and settled(pilot, view, table))


def settled(pilot, view, table) -> bool:  # type: ignore[no-untyped-def]
    """No store read of the view still under way and the table's column widths fitted to its rows
    (the fit waits for an idle moment, which a busy machine postpones)."""
    reading = any(w.node is view and not w.is_finished for w in pilot.app.workers)
    return not reading and not table._require_update_dimensions


async def database_maximized(pilot) -> None:  # type: ignore[no-untyped-def]
    await database(pilot)
    await pilot.press("z")
    await pilot.pause(0.3)


async def charts(pilot) -> None:  # type: ignore[no-untyped-def]
    await running(pilot)
    await pilot.press("5")
    view = pilot.app.query_one(ChartsView)

    def drawn() -> bool:  # every chart in the scrolled view has drawn the run's data
        shown = view.query_one("#charts-scroll").region
        panels = [p for p in view.panels() if p.region.overlaps(shown)]
        # redraw() ran (subtitle) and the drawing shows it
        return bool(panels) and all(not p.stale and p._key == p._cache_key() for p in panels)  # type: ignore[attr-defined]

    await wait_until(pilot, drawn)


async def chart_zoomed(pilot) -> None:  # type: ignore[no-untyped-def]
    await charts(pilot)
    await pilot.press("down", "enter")
    await pilot.pause(0.8)


@dataclass(frozen=True)
class Sized:
    prepare: Callable[..., Awaitable[None]]
    before: Callable[[Path], None] = make_store


SIZED: dict[str, Sized] = {
    "running": Sized(running),
    "database": Sized(database),
    "charts": Sized(charts),
}
