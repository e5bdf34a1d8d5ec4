"""Store queries behind the Database tab, checked against a plain read of the same fixture store."""

import re
import sqlite3
import time
from dataclasses import replace

import pytest

from grpo_tui.protocol.schema import STEP_METRIC_COLUMNS, StoreError, migrate
from grpo_tui.tui.db import GenFilter, QueryError, open_readonly
from grpo_tui.tui.db import queries as q
from grpo_tui.tui.db.filters import from_form
from grpo_tui.tui.db.format import sort_rows, tools
from grpo_tui.tui.format import duration, number, signed

from .conftest import all_generations
from .make_store import HOSTILE, RunSpec, add_steps


def every_page(conn, f, limit=7):
    """All rows of ``f`` by following next cursors; fails on a loop."""
    rows, after = [], None
    for _ in range(1000):
        page = q.generations_page(conn, f, after, limit=limit)
        rows += page.rows
        if page.next is None:
            return rows
        after = page.next
    raise AssertionError("pagination never ended")


def matches(g: dict, f: GenFilter) -> bool:
    """The oracle: does generation ``g`` satisfy ``f`` (text as one lowercase word)."""
    think = g["thinking"] or ""
    words = set(re.findall(r"\w+", f"{g['prompt']} {g['completion']} {think}".lower()))
    s = g["statuses"]
    tool_ok = {None: True, "any": bool(s), "none": not s, "error": any(x != "ok" for x in s)}
    return all([
        f.run_id is None or g["run_id"] == f.run_id,
        f.step_min is None or g["step"] >= f.step_min, f.step_max is None or g["step"] <= f.step_max,
        f.reward_min is None or (g["reward"] is not None and g["reward"] >= f.reward_min),
        f.reward_max is None or (g["reward"] is not None and g["reward"] <= f.reward_max),
        f.finish_reason is None or g["finish_reason"] == f.finish_reason,
        f.prompt_index is None or g["prompt_index"] == f.prompt_index,
        tool_ok.get(f.tool_status, f.tool_status in s),
        f.tool_name is None or f.tool_name in g["tool_names"],
        f.has_thinking is None or bool(think) == f.has_thinking,
        not f.text or f.text.lower() in words,
    ])


def test_runs_summarise_each_run(conn):
    runs = q.runs(conn)
    assert [(r.id, r.name, r.status, r.steps) for r in runs] == [
        (2, "gsm8k-lora", "running", 4), (1, "gsm8k-qwen", "completed", 12)]
    curve = q.curve(conn, 1)
    assert runs[1].best_reward == max(r for _, r, _ in curve) and runs[1].last_reward == curve[-1][1]
    assert runs[1].duration_s == 12 * 10.0 + 5  # ended_at - started_at
    assert runs[0].duration_s == 40.0  # still running: up to its last step


def test_steps_have_every_metric_and_sort_by_any_column(conn):
    rows = q.steps(conn, 1)
    assert [r["step"] for r in rows] == list(range(1, 13))
    assert set(STEP_METRIC_COLUMNS) <= set(rows[0])
    by_loss = sort_rows(rows, "loss", descending=True)
    assert [r["loss"] for r in by_loss] == sorted((r["loss"] for r in rows), reverse=True)
    rows[3]["kl"] = None
    assert sort_rows(rows, "kl", descending=True)[-1]["step"] == 4  # missing values last either way
    assert sort_rows(rows, "kl")[-1]["step"] == 4


@pytest.mark.parametrize("sort, descending", [("step", True), ("step", False), ("reward", True), ("reward", False)])
def test_pages_cover_every_generation_once_in_order(store_path, writer, conn, sort, descending):
    writer.execute("UPDATE generations SET reward = NULL WHERE id % 9 = 0")  # unscored rows page too
    f = GenFilter(run_id=1, sort=sort, descending=descending)
    rows = every_page(conn, f)
    expected = [g for g in all_generations(store_path) if g["run_id"] == 1]
    assert sorted(r.id for r in rows) == [g["id"] for g in expected]

    def key(r):
        v = getattr(r, sort)
        return (v is not None, v if v is not None else 0, r.id)  # SQLite: NULL sorts first ascending

    assert rows == sorted(rows, key=key, reverse=descending)


def test_first_page_and_next_cursor(conn):
    page = q.generations_page(conn, GenFilter(run_id=1))
    assert len(page.rows) == q.PAGE_SIZE and page.start is None and page.next is not None
    assert page.rows[0].step == 12
    rest = q.generations_page(conn, GenFilter(run_id=1), page.next)
    assert len(rest.rows) == 96 - q.PAGE_SIZE and rest.next is None
    assert not {r.id for r in page.rows} & {r.id for r in rest.rows}


FILTERS = [
    GenFilter(run_id=1, step_min=3, step_max=5),
    GenFilter(run_id=1, step_min=10),
    GenFilter(run_id=1, reward_min=1.0),
    GenFilter(run_id=1, reward_min=0.2, reward_max=0.6),
    GenFilter(run_id=1, finish_reason="length"),
    GenFilter(run_id=1, finish_reason="stop", reward_max=0.5),
    GenFilter(run_id=1, tool_status="ok"),
    GenFilter(run_id=1, tool_status="invalid_json"),
    GenFilter(run_id=1, tool_status="missing_name"),
    GenFilter(run_id=1, tool_status="error"),
    GenFilter(run_id=1, tool_status="any"),
    GenFilter(run_id=1, tool_status="none"),
    GenFilter(run_id=1, tool_name="calculator"),
    GenFilter(run_id=1, tool_name="calculator", tool_status="invalid_json"),
    GenFilter(run_id=1, has_thinking=True),
    GenFilter(run_id=1, has_thinking=False),
    GenFilter(run_id=1, text="banana"),
    GenFilter(run_id=1, text="banana", sort="reward"),
    GenFilter(run_id=1, text="banana", descending=False),
    GenFilter(run_id=1, text="pwned"),
    GenFilter(run_id=1, text="banana", reward_min=1.0, has_thinking=True, finish_reason="stop"),
    GenFilter(run_id=2, step_min=2, step_max=2, prompt_index=1),
    GenFilter(text="orange"),
]


@pytest.mark.parametrize("f", FILTERS, ids=lambda f: f.describe())
def test_each_filter_returns_exactly_the_matching_generations(store_path, conn, f):
    expected = [g["id"] for g in all_generations(store_path) if matches(g, f)]
    assert expected, "a filter that matches nothing proves little"
    got = every_page(conn, f, limit=5)
    assert sorted(r.id for r in got) == expected
    assert q.count_generations(conn, f) == len(expected)


def test_search_by_step_reads_in_batches_without_losing_rows(store_path, conn):
    """The FTS-driven path (growing batches) with a filter that rejects most matches."""
    f = GenFilter(run_id=1, text="the", finish_reason="length")
    expected = [g["id"] for g in all_generations(store_path) if matches(g, f)]
    assert [r.id for r in every_page(conn, f, limit=2)] == sorted(expected, reverse=True)


def test_bad_operator_syntax_is_a_friendly_error(conn):
    for text in ['"unterminated', "AND", "nosuchcolumn: x", "a OR OR b"]:
        with pytest.raises(QueryError, match="Search not understood"):
            q.generations_page(conn, GenFilter(run_id=1, text=f"fts: {text}"))


def test_user_input_never_becomes_sql(store_path, conn):
    sneaky = "stop' OR '1'='1"
    assert q.generations_page(conn, GenFilter(run_id=1, finish_reason=sneaky)).rows == []
    assert q.generations_page(conn, GenFilter(run_id=1, text="x'; DROP TABLE runs; --")).rows == []
    with pytest.raises(QueryError):
        q.generations_page(conn, GenFilter(run_id=1, text="fts: x'; DROP TABLE runs; --"))
    assert len(q.runs(open_readonly(store_path))) == 2


PASTED = ["What is 78+80?", "<answer>", "don't", "168.", "C++", "*", "-168", "78+80", '"is 78"', "%", "_"]


@pytest.mark.parametrize("text", PASTED)
def test_plain_text_is_searched_as_typed(tmp_path, text):
    """What users paste (FTS5 syntax in it, or no word at all) finds exactly the generations that
    contain it, by both query paths (the index-driven page and the filtered scan) and the count."""
    texts = ["What is 78+80? <answer>158</answer>", "I don't know: 168. C++ * x", "a -168 b 100% a_b",
             "What is 78 80", "nothing here"]
    path = tmp_path / "outputs.db"
    conn = sqlite3.connect(path)
    migrate(conn)
    conn.execute("INSERT INTO runs (id, name, model, model_path, config, started_at, status, total_steps)"
                 " VALUES (1, 'r', 'm', 'p', '{}', 0, 'running', 1)")
    conn.execute("INSERT INTO steps (run_id, step, epoch, created_at) VALUES (1, 1, 0, 0)")
    for i, t in enumerate(texts):
        conn.execute("INSERT INTO generations (run_id, step, prompt_index, group_index, prompt, completion,"
                     " raw_completion, num_tokens, finish_reason, created_at) VALUES (1, 1, 0, ?, 'Q', ?, ?, 1, 'stop', 0)", (i, t, t))
    conn.commit()
    conn.close()
    typed = text.strip('"')
    expected = sorted(i + 1 for i, t in enumerate(texts) if typed.lower() in t.lower())
    assert expected, text
    ro = open_readonly(path)
    for f in (GenFilter(run_id=1, text=text), GenFilter(text=text), GenFilter(run_id=1, text=text, sort="reward")):
        assert sorted(r.id for r in every_page(ro, f, limit=1)) == expected, f
        assert q.count_generations(ro, f) == len(expected)


def test_operators_are_opt_in_behind_fts_prefix(conn, store_path):
    either = [g["id"] for g in all_generations(store_path) if g["run_id"] == 1
              and {"orange", "seven"} & set(re.findall(r"\w+", f"{g['prompt']} {g['completion']} {g['thinking'] or ''}".lower()))]
    assert either
    assert sorted(r.id for r in every_page(conn, GenFilter(run_id=1, text="fts: orange OR seven"))) == either
    assert every_page(conn, GenFilter(run_id=1, text="orange OR seven")) == []  # plain: the words as typed, all of them


def test_detail_and_group(conn):
    row = next(r for r in every_page(conn, GenFilter(run_id=1, tool_status="invalid_json")))
    d = q.generation(conn, row.id)
    assert d.row == row and d.run_name == "gsm8k-qwen" and d.prompt.startswith(f"Question {row.step}-")
    assert d.reward_details == {"correctness": pytest.approx(d.row.reward - d.reward_details["format"]),
                                "format": d.reward_details["format"]}
    assert [(c.status, c.error) for c in d.tool_calls] == [("invalid_json", "invalid json in tool call")]
    group = q.generations_page(conn, q.group_filter(row)).rows
    assert sorted(g.group_index for g in group) == [0, 1, 2, 3]
    assert {(g.step, g.prompt_index) for g in group} == {(row.step, row.prompt_index)}
    assert [g.reward for g in group] == sorted((g.reward for g in group), reverse=True)
    assert q.generation(conn, 10**9) is None


def test_hostile_text_comes_back_verbatim(conn):
    (row,) = q.generations_page(conn, GenFilter(run_id=1, text="pwned")).rows
    assert q.generation(conn, row.id).completion.startswith(HOSTILE)


def test_store_is_read_only_and_never_blocks_the_writer(store_path, conn, writer):
    with pytest.raises(sqlite3.OperationalError, match="readonly|read-only"):
        conn.execute("DELETE FROM runs")
    before = q.count_generations(conn, GenFilter(run_id=2))
    writer.execute("BEGIN IMMEDIATE")
    add_steps_in_tx(writer)
    t = time.perf_counter()
    assert q.count_generations(conn, GenFilter(run_id=2)) == before  # uncommitted rows unseen, no wait
    assert time.perf_counter() - t < 1.0
    page = q.generations_page(conn, GenFilter(run_id=2))  # an open reader between statements...
    writer.execute("COMMIT")  # ...does not stop the writer committing
    assert page.rows
    add_steps(writer, 2, RunSpec("gsm8k-lora"), 6, 1)
    assert q.count_generations(conn, GenFilter(run_id=2)) == before + 1 + 8  # both commits seen at once


def add_steps_in_tx(writer):
    writer.execute("INSERT INTO steps (run_id, step, epoch, created_at) VALUES (2, 5, 0, 0)")
    writer.execute("INSERT INTO generations (run_id, step, prompt_index, group_index, prompt, completion,"
                   " raw_completion, finish_reason, created_at) VALUES (2, 5, 0, 0, 'p', 'c', 'c', 'stop', 0)")


def test_bad_files_are_refused_with_one_sentence(tmp_path):
    with pytest.raises(StoreError, match="no such file"):
        open_readonly(tmp_path / "missing.db")
    text = tmp_path / "notes.txt"
    text.write_text("hello " * 1000)
    with pytest.raises(StoreError, match="not .*grpo-tui store|not an SQLite database"):
        open_readonly(text)
    other = tmp_path / "other.db"
    sqlite3.connect(other).execute("CREATE TABLE t (x)").connection.commit()
    with pytest.raises(StoreError, match="not a grpo-tui store"):
        open_readonly(other)
    newer = tmp_path / "newer.db"
    c = sqlite3.connect(newer, isolation_level=None)
    migrate(c)
    c.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    c.close()
    with pytest.raises(StoreError, match="newer than this grpo-tui understands"):
        open_readonly(newer)


def test_filter_text_helpers():
    f = GenFilter(run_id=1, step_min=3, step_max=9, reward_min=0.5, finish_reason="length", tool_status="error",
                  has_thinking=True, text="seven")
    assert f.describe() == ("steps 3–9 · reward ≥ 0.5 · finish length · a failed tool call · with thinking · "
                            "search 'seven' · sorted by step ↓")
    assert f.cleared() == GenFilter(run_id=1) and f.cleared().is_clear and not f.is_clear
    orders = [GenFilter()]
    for _ in range(4):
        orders.append(orders[-1].with_next_sort())
    assert [(o.sort, o.descending) for o in orders] == [
        ("step", True), ("step", False), ("reward", True), ("reward", False), ("step", True)]
    parsed, errors = from_form(GenFilter(run_id=1), step_min=" 4 ", step_max="", reward_min="0.25",
                               reward_max="-", text="  two words ")
    assert parsed == GenFilter(run_id=1, step_min=4, reward_min=0.25, text="two words") and errors == ["reward_max"]
    assert replace(parsed, text="").describe().startswith("steps 4–…")


def test_format_helpers():
    assert [number(v) for v in (None, 3, 12345, 0.5, 1.0, 1e-5, 0.12345, True)] == [
        "—", "3", "12,345", "0.5", "1", "1.00e-05", "0.1235", "yes"]
    assert [signed(v) for v in (0.70711, -0.5, 0.0)] == ["+0.7071", "-0.5", "0"]
    assert [duration(s) for s in (5, 125, 7260)] == ["5s", "2m05s", "2h01m"]
    assert tools(("ok", "ok", "invalid_json")) == "2 ok 1 invalid_json" and tools(()) == ""
