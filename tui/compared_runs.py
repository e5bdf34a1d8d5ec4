"""Other runs drawn over this run's charts (docs/steering.md, "Compare runs"). No Textual here.

Each compared run is read from its own store into a ``SeriesBook`` of its own, flattened as the live
book is (``flatten_step``), so every chart finds the same column in it; a live run's new steps are
read on a slow poll (``read_new``). Each run keeps its colour while it is compared.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

from grpo_tui.protocol.schema import STEP_METRIC_COLUMNS, StoreError, step_from_row
from grpo_tui.tui.compare import CompareError, run_config
from grpo_tui.tui.db.queries import run_of_output_dir
from grpo_tui.tui.db.store import open_readonly
from grpo_tui.tui.series import SeriesBook

THIS_RUN_STYLE = "green"  # the run of the dashboard, in every chart of compare mode
RUN_STYLES = ("bright_magenta", "bright_blue", "yellow", "bright_red")  # the compared runs'
MAX_COMPARED = len(RUN_STYLES)
_COLUMNS = ", ".join(("step", "epoch", *STEP_METRIC_COLUMNS))


@dataclass
class ComparedRun:
    folder: Path
    name: str
    style: str
    store: Path
    run_id: int
    book: SeriesBook = field(default_factory=SeriesBook)
    last_step: int = 0


@dataclass
class ComparedRuns:
    """The runs compared with this one, shared by the main chart and the Charts tab's panels;
    ``version`` moves on every change (part of each chart's cache key)."""

    runs: list[ComparedRun] = field(default_factory=list)
    version: int = 0

    def folders(self) -> list[Path]:
        return [r.folder for r in self.runs]

    def replace(self, runs: list[ComparedRun]) -> None:
        self.runs = runs[:MAX_COMPARED]
        self.version += 1

    def touched(self) -> None:
        self.version += 1


def open_run(folder: Path, style: str) -> ComparedRun:
    """A run folder's steps so far. Raises ``CompareError`` (one sentence)."""
    from grpo_tui.tui.runs import store_of

    folder = folder.resolve()
    config = run_config(folder)
    store = store_of(folder)
    try:
        conn = open_readonly(store)
    except StoreError as exc:
        raise CompareError(str(exc)) from None
    try:
        run = ComparedRun(folder, config.run_name, style, store, run_of_output_dir(conn, folder))
        if config.fork is not None:  # a fork starts at its branch point (its store holds its parent's steps before)
            run.last_step = config.fork.step
        _read(conn, run)
    except (StoreError, sqlite3.Error) as exc:
        raise CompareError(f"{store}: {exc}") from None
    finally:
        conn.close()
    return run


def read_new(run: ComparedRun) -> int:
    """The steps the run's store got since the last read (a live run); how many. A store that cannot
    be read right now (being written, moved) is read again at the next poll."""
    try:
        conn = open_readonly(run.store)
    except StoreError:
        return 0
    try:
        return _read(conn, run)
    except sqlite3.Error:
        return 0
    finally:
        conn.close()


def _read(conn: sqlite3.Connection, run: ComparedRun) -> int:
    rows = conn.execute(f"SELECT {_COLUMNS} FROM steps WHERE run_id = ? AND step > ? ORDER BY step",
                        (run.run_id, run.last_step)).fetchall()
    for row in rows:
        step = step_from_row(dict(row))
        run.book.append_step(step.step, step)
        run.last_step = step.step
    return len(rows)


def candidates(folder: Path) -> list[Path]:
    """The runs worth comparing with the one in ``folder``: its parent and its forks first, then every
    other run under the folder above it."""
    from grpo_tui.tui.runs import config_for, find_runs

    folder = folder.resolve()
    config = config_for(folder)
    near: list[Path] = []
    if config is not None and config.fork is not None:
        near.append(Path(config.fork.parent).resolve())
    others = [r for r in find_runs(folder.parent, max_depth=2) if r.folder != folder]
    near += [r.folder for r in others if r.parent is not None and r.parent.resolve() == folder]
    near += [r.folder for r in others]
    seen: list[Path] = []
    for path in near:
        if path not in seen and path != folder:
            seen.append(path)
    return seen
