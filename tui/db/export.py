"""Export the generations of a filter to JSONL or CSV, with progress and cancellation.

Runs in a thread worker; reads through ``queries.iter_generations`` (short keyset batches) and
writes to a temporary sibling that is renamed into place, so a cancelled or failed export never
leaves a half file under the requested name.
"""

from __future__ import annotations

import csv
import json
import os
import sqlite3
from pathlib import Path
from typing import Callable

from grpo_tui.tui.db.filters import GenFilter
from grpo_tui.tui.db.queries import count_generations, iter_generations

FORMATS = ("jsonl", "csv")
CSV_COLUMNS = (
    "id", "run_id", "step", "prompt_index", "group_index", "reward", "advantage", "num_tokens", "finish_reason",
    "prompt", "completion", "thinking", "raw_completion", "reward_details", "tool_calls", "created_at",
)
Progress = Callable[[int, int], None]  # (rows written, rows in total)


class ExportCancelled(Exception):
    pass


def format_for(path: str | Path) -> str:
    """``csv`` for a ``.csv`` path, ``jsonl`` otherwise."""
    return "csv" if str(path).lower().endswith(".csv") else "jsonl"


def export(conn: sqlite3.Connection, f: GenFilter, path: str | Path, fmt: str | None = None,
           progress: Progress | None = None, cancelled: Callable[[], bool] = lambda: False,
           every: int = 1000) -> int:
    """Write every generation of ``f`` to ``path``; returns the number of rows written."""
    fmt = fmt or format_for(path)
    if fmt not in FORMATS:
        raise ValueError(f"unknown export format {fmt!r}")
    path = Path(path)
    total = count_generations(conn, f)
    tmp = path.with_name(f".{path.name}.part")
    written = 0
    try:
        with open(tmp, "w", encoding="utf-8", newline="") as out:
            writer = csv.DictWriter(out, CSV_COLUMNS, extrasaction="ignore") if fmt == "csv" else None
            if writer:
                writer.writeheader()
            for item in iter_generations(conn, f):
                if writer:
                    writer.writerow({**item, "reward_details": json.dumps(item["reward_details"]),
                                     "tool_calls": json.dumps(item["tool_calls"])})
                else:
                    out.write(json.dumps(item, ensure_ascii=False) + "\n")
                written += 1
                if written % every == 0:
                    if cancelled():
                        raise ExportCancelled
                    if progress:
                        progress(written, max(total, written))
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    if progress:
        progress(written, max(total, written))
    return written
