"""Export of a filter to JSONL / CSV: the files hold exactly the filter's generations."""

import csv
import json

import pytest

from grpo_tui.tui.db import GenFilter
from grpo_tui.tui.db import queries as q
from grpo_tui.tui.db.export import ExportCancelled, export, format_for

from .make_store import HOSTILE


def test_jsonl_holds_every_filtered_generation_with_tool_calls(conn, tmp_path):
    f = GenFilter(run_id=1, step_min=1, step_max=3)
    seen = []
    n = export(conn, f, tmp_path / "out.jsonl", progress=lambda done, total: seen.append((done, total)), every=5)
    lines = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert n == len(lines) == 24 == q.count_generations(conn, f)
    assert [r["step"] for r in lines] == sorted((r["step"] for r in lines), reverse=True)
    assert seen[0] == (5, 24) and seen[-1] == (24, 24)
    hostile = next(r for r in lines if r["completion"].startswith(HOSTILE))  # text verbatim, escapes included
    assert sum(hostile["reward_details"].values()) == hostile["reward"]
    with_calls = [r for r in lines if r["tool_calls"]]
    assert len(with_calls) == 6 and {c["status"] for r in with_calls for c in r["tool_calls"]} == {
        "ok", "invalid_json", "missing_name"}


def test_csv_round_trips_through_the_csv_module(conn, tmp_path):
    f = GenFilter(run_id=1, text="banana", sort="reward")
    path = tmp_path / "out.csv"
    assert format_for(path) == "csv"
    n = export(conn, f, path)
    with open(path, newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    assert n == len(rows) == q.count_generations(conn, f) > 0
    assert all("banana" in (r["prompt"] + r["completion"] + r["thinking"]).lower() for r in rows)
    assert [float(r["reward"]) for r in rows] == sorted((float(r["reward"]) for r in rows), reverse=True)
    assert isinstance(json.loads(rows[0]["reward_details"]), dict)


def test_cancel_leaves_no_file(conn, tmp_path):
    path = tmp_path / "out.jsonl"
    with pytest.raises(ExportCancelled):
        export(conn, GenFilter(run_id=1), path, cancelled=lambda: True, every=10)
    assert [p.name for p in tmp_path.iterdir() if "out." in p.name] == []  # nor a .part file
