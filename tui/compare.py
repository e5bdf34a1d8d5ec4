"""``grpo-tui compare A B [C…] [--json]``: runs side by side (docs/steering.md, "Compare runs").

For each run folder: steps, wall time, last and best reward, last and best eval accuracy, read from
its store; then every config key whose value differs between the runs, a live change shown where it
happened ("1e-05 → 5e-06 at step 12"). No Textual here: the dashboard's overlay is
``tui/compared_runs.py``.
"""

from __future__ import annotations

import json
import sqlite3
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from grpo_tui.protocol.config import Config
from grpo_tui.protocol.schema import StoreError
from grpo_tui.tui.db.queries import run_of_output_dir
from grpo_tui.tui.db.store import open_readonly
from grpo_tui.tui.format import duration

# Keys that differ between any two runs by construction: not a difference worth a row.
NOT_COMPARED = ("name", "checkpoint.output_dir", "checkpoint.resume", "store.path", "fork.", "runtime.")


class CompareError(Exception):
    """A folder that cannot be compared: one sentence."""


@dataclass
class RunFigures:
    folder: str
    name: str
    status: str
    steps: int
    total_steps: int | None
    wall_time_s: float
    last_reward: float | None
    best_reward: float | None
    last_accuracy: float | None
    best_accuracy: float | None
    parent: str | None  # a fork's parent folder, and the step it branched at
    branch_step: int | None
    settings: dict[str, str] = field(default_factory=dict)  # flattened key → value (live changes shown)


def run_config(folder: Path) -> Config:
    """The config of the run in ``folder``; ``CompareError`` when it holds no run."""
    from grpo_tui.tui.runs import config_for

    config = config_for(folder) if folder.is_dir() else None
    if config is None:
        raise CompareError(f"{folder}: not a run folder; name a run's output folder (`grpo-tui ls` lists runs)")
    return config


def run_figures(folder: Path) -> RunFigures:
    """What ``compare`` prints of one run folder. Raises ``CompareError`` (one sentence)."""
    from grpo_tui.tui.runs import run_info, store_of

    config = run_config(folder)
    store = store_of(folder)
    if not store.is_file():
        raise CompareError(f"{folder}: no {store.name} to read; a run writes it from its first step")
    branch = config.fork.step if config.fork is not None else 0
    try:
        conn = open_readonly(store)
    except StoreError as exc:
        raise CompareError(str(exc)) from None
    try:
        run_id = run_of_output_dir(conn, folder)
        figures = _figures(conn, run_id, branch)
        changes = [(r["step"], r["key"], r["new"]) for r in conn.execute(
            "SELECT step, key, new FROM setting_changes WHERE run_id = ? AND step > ? ORDER BY step, id", (run_id, branch))]
        settings = _flatten(msgspec.to_builtins(config))
        for step, key, new in changes:
            value = _text(json.loads(new)) if new is not None else "-"
            settings[str(key)] = f"{settings.get(str(key), '-')} → {value} at step {step}"
    except StoreError as exc:
        raise CompareError(str(exc)) from None
    except (sqlite3.Error, ValueError, TypeError) as exc:  # a missing table, a row that is not what grpo-tui wrote
        raise CompareError(f"{store}: {exc}; the store is damaged or not a grpo-tui store") from None
    finally:
        conn.close()
    info = run_info(folder)
    return RunFigures(
        folder=str(folder), name=config.run_name, status=info.status if info is not None else figures["status"],
        steps=figures["steps"], total_steps=figures["total_steps"], wall_time_s=figures["wall"],
        last_reward=figures["last_reward"], best_reward=figures["best_reward"],
        last_accuracy=figures["last_accuracy"], best_accuracy=figures["best_accuracy"],
        parent=config.fork.parent if config.fork is not None else None,
        branch_step=config.fork.step if config.fork is not None else None, settings=settings)


def _figures(conn: sqlite3.Connection, run_id: int, branch: int) -> dict[str, Any]:
    run = conn.execute("SELECT status, total_steps, started_at, ended_at FROM runs WHERE id = ?", (run_id,)).fetchone()
    steps = conn.execute(
        "SELECT count(*) AS n, max(step) AS last, max(reward) AS best FROM steps WHERE run_id = ?", (run_id,)).fetchone()
    last = conn.execute("SELECT reward FROM steps WHERE run_id = ? ORDER BY step DESC LIMIT 1", (run_id,)).fetchone()
    best_accuracy = conn.execute("SELECT max(accuracy) FROM evals WHERE run_id = ?", (run_id,)).fetchone()[0]
    return {"status": run["status"], "total_steps": _real(run["total_steps"], "total_steps"),
            "steps": _real(steps["last"], "step") or 0, "wall": _wall_time(conn, run_id, run, branch),
            "last_reward": _real(last["reward"] if last else None, "reward"), "best_reward": _real(steps["best"], "reward"),
            "last_accuracy": _real(_last_eval(conn, run_id), "accuracy"), "best_accuracy": _real(best_accuracy, "accuracy")}


def _real(value: Any, column: str) -> Any:
    """A number (or None) read from the store; a ``TypeError`` naming the column for anything else."""
    if value is None or isinstance(value, (int, float)) and not isinstance(value, bool):
        return value
    raise TypeError(f"a {column} value is {type(value).__name__} {str(value)[:20]!r}, not a number")


def _last_eval(conn: sqlite3.Connection, run_id: int) -> float | None:
    row = conn.execute("SELECT accuracy FROM evals WHERE run_id = ? AND accuracy IS NOT NULL "
                       "ORDER BY step DESC, greedy DESC LIMIT 1", (run_id,)).fetchone()
    return row["accuracy"] if row else None


def _wall_time(conn: sqlite3.Connection, run_id: int, run: sqlite3.Row, branch: int) -> float:
    """From the run's start to its end (or last step); a fork's from its own first step, since its
    store's run began in the parent."""
    if not branch:
        end = run["ended_at"] or conn.execute("SELECT max(created_at) FROM steps WHERE run_id = ?", (run_id,)).fetchone()[0]
        return max(0.0, (end or run["started_at"]) - run["started_at"])
    own = conn.execute("SELECT min(created_at), max(created_at) FROM steps WHERE run_id = ? AND step > ?",
                       (run_id, branch)).fetchone()
    first = conn.execute("SELECT coalesce(generation_ms, 0) + coalesce(scoring_ms, 0) + coalesce(training_ms, 0) "
                         "FROM steps WHERE run_id = ? AND step > ? ORDER BY step LIMIT 1", (run_id, branch)).fetchone()
    if own[0] is None:
        return 0.0
    return max(0.0, own[1] - own[0] + (first[0] or 0.0) / 1000)


def _flatten(value: Any, prefix: str = "") -> dict[str, str]:
    if isinstance(value, dict):
        out: dict[str, str] = {}
        for key, item in value.items():
            out.update(_flatten(item, f"{prefix}{key}."))
        return out
    if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):  # [[rewards]], [[tools]]
        out = {}
        for i, item in enumerate(value):
            out.update(_flatten(item, f"{prefix[:-1]}[{i}]."))
        return out
    return {prefix[:-1]: _text(value)}


def _text(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    return json.dumps(value) if isinstance(value, (list, dict)) else str(value)


def differences(runs: list[RunFigures]) -> list[tuple[str, list[str]]]:
    """``(key, value per run)`` for every key whose value is not the same in every run, by key."""
    keys = sorted({k for r in runs for k in r.settings})
    out = []
    for key in keys:
        if key.startswith(NOT_COMPARED) or key in NOT_COMPARED:
            continue
        values = [r.settings.get(key, "-") for r in runs]
        if len(set(values)) > 1:
            out.append((key, values))
    return out


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def format_comparison(runs: list[RunFigures]) -> list[str]:
    """The terminal table: one column per run, the figures, then the config differences."""
    rows: list[tuple[str, ...]] = [
        ("", *(r.name for r in runs)),
        ("folder", *(r.folder for r in runs)),
        ("forked from", *(f"{Path(r.parent).name} at step {r.branch_step}" if r.parent else "-" for r in runs)),
        ("status", *(r.status for r in runs)),
        ("steps", *(f"{r.steps}/{r.total_steps or '?'}" for r in runs)),
        ("wall time", *(duration(r.wall_time_s) for r in runs)),
        ("reward last / best", *(f"{_number(r.last_reward)} / {_number(r.best_reward)}" for r in runs)),
        ("eval accuracy last / best", *(f"{_number(r.last_accuracy)} / {_number(r.best_accuracy)}" for r in runs)),
    ]
    found = differences(runs)
    blank = ("",) * (len(runs) + 1)
    heading = ("config differences" if found else "config differences: none", *blank[1:])
    return _table([*rows, blank, heading, *((key, *values) for key, values in found)])


def _table(rows: list[tuple[str, ...]]) -> list[str]:
    """Columns as wide as their widest cell; a heading row (its other cells empty) is not measured."""
    measured = [row for row in rows if any(row[1:])]
    widths = [max(len(row[i]) for row in measured) for i in range(len(rows[0]))]
    return ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() if any(row[1:]) else row[0]
            for row in rows]


def as_json(runs: list[RunFigures]) -> dict[str, Any]:
    return {"runs": [{k: v for k, v in asdict(r).items() if k != "settings"} for r in runs],
            "differences": [{"key": key, "values": values} for key, values in differences(runs)]}


def run_compare(folders: list[str], json_output: bool) -> int:
    """The command: 0, or 2 with one sentence when a folder is not a run."""
    try:
        runs = [run_figures(Path(f).resolve()) for f in folders]
    except CompareError as exc:
        print(f"grpo-tui: {exc}.", file=sys.stderr)
        return 2
    print(json.dumps(as_json(runs), indent=2) if json_output else "\n".join(format_comparison(runs)))
    return 0
