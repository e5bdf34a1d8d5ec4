"""Pure query functions over a read-only store connection (see ``store.open_readonly``).

Generations are paged with keyset pagination: a page ends with a cursor ``(sort value, id)`` and the
next page starts strictly after it in the same ORDER BY, so page 10,000 costs what page 1 costs (an
index range scan) instead of an OFFSET walk over everything before it.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Sequence

import msgspec

from grpo_tui.protocol import messages as m
from grpo_tui.protocol.schema import STEP_METRIC_COLUMNS, StoreError
from grpo_tui.tui.db import search
from grpo_tui.tui.db.filters import GenFilter, where

PAGE_SIZE = 50
STEP_COLUMNS: tuple[str, ...] = ("step", "epoch", *STEP_METRIC_COLUMNS, "created_at")
Cursor = tuple[Any, int]  # (value of the sort column, generation id) of a page's last row


class QueryError(Exception):
    """A query the user's input made impossible (e.g. bad search syntax); the message is for people."""


@dataclass(frozen=True)
class Run:
    id: int
    name: str
    status: str
    model: str | None
    steps: int
    total_steps: int | None
    best_reward: float | None
    last_reward: float | None
    started_at: float
    duration_s: float


@dataclass(frozen=True)
class GenRow:
    """One line of the generations table."""

    id: int
    run_id: int
    step: int
    prompt_index: int
    group_index: int
    reward: float | None
    advantage: float | None
    num_tokens: int
    finish_reason: str
    first_line: str
    has_thinking: bool
    tool_statuses: tuple[str, ...]


@dataclass(frozen=True)
class Page:
    rows: list[GenRow]
    start: Cursor | None  # the cursor this page was read after (None = first page)
    next: Cursor | None  # None on the last page


@dataclass(frozen=True)
class ToolCallRow:
    call_index: int
    name: str | None
    arguments: str | None
    status: str
    error: str | None
    raw: str | None


@dataclass(frozen=True)
class GenDetail:
    row: GenRow
    run_name: str
    prompt: str
    completion: str
    raw_completion: str
    thinking: str | None
    reward_details: dict[str, float | None]
    created_at: float
    tool_calls: list[ToolCallRow] = field(default_factory=list)
    turns: list[m.Turn] = field(default_factory=list)  # agent rollouts (store v3), else empty
    dropped: bool = False  # dynamic sampling dropped its group: not trained on (store v6)
    policy_step: int | None = None  # [async]: the learner step whose weights sampled it (store v12)


def runs(conn: sqlite3.Connection) -> list[Run]:
    """Every run, newest first, with step counts and best / last mean step reward."""
    sql = """
        SELECT r.id, r.name, r.status, r.model, r.total_steps, r.started_at,
               coalesce(r.ended_at, s.last_at, r.started_at) - r.started_at AS duration,
               coalesce(s.n, 0) AS n, s.best,
               (SELECT reward FROM steps WHERE run_id = r.id ORDER BY step DESC LIMIT 1) AS last
        FROM runs r LEFT JOIN (
            SELECT run_id, count(*) AS n, max(reward) AS best, max(created_at) AS last_at
            FROM steps GROUP BY run_id) s ON s.run_id = r.id
        ORDER BY r.id DESC"""
    return [
        Run(id=r["id"], name=r["name"], status=r["status"], model=r["model"], steps=r["n"],
            total_steps=r["total_steps"], best_reward=r["best"], last_reward=r["last"],
            started_at=r["started_at"], duration_s=max(r["duration"] or 0.0, 0.0))
        for r in conn.execute(sql)
    ]


def steps(conn: sqlite3.Connection, run_id: int) -> list[dict[str, Any]]:
    """Every step row of a run with every metric, by step (``format.sort_rows`` sorts by any column)."""
    return [dict(r) for r in conn.execute(
        f"SELECT {', '.join(STEP_COLUMNS)} FROM steps WHERE run_id = ? ORDER BY step", (run_id,))]


def curve(conn: sqlite3.Connection, run_id: int) -> list[tuple[int, float | None, float | None]]:
    """``(step, reward, loss)`` per step of a run, for charts."""
    return [tuple(r) for r in conn.execute(
        "SELECT step, reward, loss FROM steps WHERE run_id = ? ORDER BY step", (run_id,))]


_ROW_SQL = """g.id, g.run_id, g.step, g.prompt_index, g.group_index, g.reward, g.advantage, g.num_tokens,
    g.finish_reason, substr(g.completion, 1, 240) AS head,
    (g.thinking IS NOT NULL AND g.thinking != '') AS has_thinking,
    (SELECT group_concat(t.status, ',') FROM tool_calls t WHERE t.generation_id = g.id) AS tools"""


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def _gen_row(r: sqlite3.Row) -> GenRow:
    return GenRow(
        id=r["id"], run_id=r["run_id"], step=r["step"], prompt_index=r["prompt_index"],
        group_index=r["group_index"], reward=r["reward"], advantage=r["advantage"],
        num_tokens=r["num_tokens"], finish_reason=r["finish_reason"], first_line=_first_line(r["head"]),
        has_thinking=bool(r["has_thinking"]), tool_statuses=tuple((r["tools"] or "").split(",")) if r["tools"] else (),
    )


def _keyset(f: GenFilter, after: Cursor | None) -> tuple[str, list[Any]]:
    """The condition "strictly after ``after`` in ``f``'s order". SQLite sorts NULL first ascending,
    so NULL rewards come first when ascending and last when descending."""
    if after is None:
        return "1", []
    value, gid = after
    op = "<" if f.descending else ">"
    if f.sort == "step":
        return f"(g.step, g.id) {op} (?, ?)", [value, gid]
    if value is None:
        if f.descending:
            return "(g.reward IS NULL AND g.id < ?)", [gid]
        return "((g.reward IS NULL AND g.id > ?) OR g.reward IS NOT NULL)", [gid]
    cond = f"(g.reward, g.id) {op} (?, ?)"
    return (f"({cond} OR g.reward IS NULL)" if f.descending else cond), [value, gid]


def _order(f: GenFilter) -> str:
    d = "DESC" if f.descending else "ASC"
    return f"g.{f.sort} {d}, g.id {d}"


def _execute(conn: sqlite3.Connection, sql: str, params: list[Any]) -> list[sqlite3.Row]:
    """Run one SELECT to completion (no read transaction left open); search errors become QueryError."""
    try:
        return conn.execute(sql, params).fetchall()
    except sqlite3.OperationalError as exc:
        msg = str(exc)
        if "no such column" in msg and "dropped" in msg:
            raise QueryError("This store was written before dynamic sampling (no dropped groups): every generation "
                             "in it was trained on.") from None
        if "no such table" in msg and "prompt_visits" in msg:
            raise QueryError("This store was written before the curriculum (no prompt visits): its prompts have no "
                             "states or history.") from None
        if "fts5" in msg or "no such column" in msg or "unterminated" in msg or "malformed MATCH" in msg:
            raise QueryError(
                f"Search not understood ({msg}). After {search.FTS_PREFIX} use words, \"quoted phrases\", "
                "AND / OR / NOT, prefix*, or column:word with prompt, completion or thinking; "
                f"without {search.FTS_PREFIX} the text is searched as typed."
            ) from None
        if "interrupted" in msg:
            raise QueryError("Query cancelled.") from None
        raise


def _cursor(f: GenFilter, row: sqlite3.Row) -> Cursor:
    return (row[f.sort], row["id"])


def generations_page(conn: sqlite3.Connection, f: GenFilter, after: Cursor | None = None,
                     limit: int = PAGE_SIZE) -> Page:
    """Up to ``limit`` generations matching ``f`` after the cursor ``after`` (None: the first page)."""
    if _indexed(f) is not None and f.sort == "step" and f.run_id is not None:
        rows = _search_by_id(conn, f, after, limit + 1)
    else:
        cond, params = where(f)
        key, key_params = _keyset(f, after)
        rows = _execute(conn, f"SELECT {_ROW_SQL} FROM generations g WHERE {cond} AND {key} "
                              f"ORDER BY {_order(f)} LIMIT ?", [*params, *key_params, limit + 1])
    more = len(rows) > limit
    rows = rows[:limit]
    return Page(rows=[_gen_row(r) for r in rows], start=after,
                next=_cursor(f, rows[-1]) if more and rows else None)


def _search_by_id(conn: sqlite3.Connection, f: GenFilter, after: Cursor | None, want: int) -> list[sqlite3.Row]:
    """A searched page sorted by step, driven by the FTS index in rowid order.

    Within a run, generation ids grow with the step (the worker writes steps in order, and a resume
    deletes the later rows before writing again), so FTS rowid order is (step, id) order. Reading
    matches in growing batches and checking the other conditions on each batch costs what the page
    needs, where ``id IN (every match)`` would first collect every match of a common word.
    """
    cond, params = where(f, match=False)
    key, key_params = _keyset(f, after)
    op, direction = ("<", "DESC") if f.descending else (">", "ASC")
    bound = None if after is None else after[1]
    found: list[sqlite3.Row] = []
    batch = 4 * want
    while len(found) < want:
        matches = ("SELECT rowid FROM generations_fts WHERE generations_fts MATCH ?"
                   + (f" AND rowid {op} ?" if bound is not None else "") + f" ORDER BY rowid {direction} LIMIT ?")
        batch_params = [_indexed(f), *([] if bound is None else [bound]), batch]
        # CROSS JOIN: look each match up by rowid; never let the planner scan the whole run instead.
        found += _execute(conn, f"SELECT {_ROW_SQL} FROM ({matches}) m CROSS JOIN generations g ON g.id = m.rowid"
                                f" WHERE {cond} AND {key} ORDER BY {_order(f)}",
                          [*batch_params, *params, *key_params])
        seen, last = _execute(conn, f"SELECT count(*), {'min' if f.descending else 'max'}(rowid) FROM ({matches})",
                              batch_params)[0]
        if seen < batch:
            break
        bound, batch = last, min(batch * 4, 65_536)
    return found[:want]


def count_generations(conn: sqlite3.Connection, f: GenFilter) -> int:
    """How many generations match ``f``. With a search, the matches drive (each looked up by id)."""
    if (match := _indexed(f)) is None:
        cond, params = where(f)
        return _execute(conn, f"SELECT count(*) FROM generations g WHERE {cond}", params)[0][0]
    cond, params = where(f, match=False)
    return _execute(conn, "SELECT count(*) FROM (SELECT rowid FROM generations_fts WHERE generations_fts MATCH ?) m"
                          f" CROSS JOIN generations g ON g.id = m.rowid WHERE {cond}", [match, *params])[0][0]


def _indexed(f: GenFilter) -> str | None:
    """The FTS5 MATCH expression of ``f``'s search, when the index can drive it."""
    found = search.parse(f.text)
    return found.match if found is not None else None


def iter_generations(conn: sqlite3.Connection, f: GenFilter, batch: int = 500) -> Iterator[dict[str, Any]]:
    """Every generation matching ``f`` as a full dict (tool calls included), in ``f``'s order.

    Reads keyset batches, each its own short statement, so a long export never holds a read
    transaction open against the writer.
    """
    cond, params = where(f)
    after: Cursor | None = None
    while True:
        key, key_params = _keyset(f, after)
        rows = _execute(conn, f"SELECT g.* FROM generations g WHERE {cond} AND {key} ORDER BY {_order(f)} LIMIT ?",
                        [*params, *key_params, batch])
        if not rows:
            return
        calls = _tool_calls(conn, [r["id"] for r in rows])
        for r in rows:
            item = dict(r)
            item["reward_details"] = _json(item["reward_details"])
            item["tool_calls"] = [c.__dict__ for c in calls.get(r["id"], [])]
            if item.get("turns"):  # store v3, agent rollouts: the conversation as data, not a string
                item["turns"] = _json(item["turns"])
            yield item
        if len(rows) < batch:
            return
        after = _cursor(f, rows[-1])


def _json(text: str | None) -> Any:
    try:
        return json.loads(text) if text else {}
    except ValueError:
        return {"unparsed": text}


def _tool_calls(conn: sqlite3.Connection, ids: list[int]) -> dict[int, list[ToolCallRow]]:
    out: dict[int, list[ToolCallRow]] = {}
    if not ids:
        return out
    rows = conn.execute(
        f"SELECT generation_id, call_index, name, arguments, status, error, raw FROM tool_calls "
        f"WHERE generation_id IN ({', '.join('?' * len(ids))}) ORDER BY generation_id, call_index", ids).fetchall()
    for r in rows:
        out.setdefault(r["generation_id"], []).append(ToolCallRow(*tuple(r)[1:]))
    return out


def generation(conn: sqlite3.Connection, generation_id: int) -> GenDetail | None:
    """Everything about one generation, or None if it is gone (e.g. deleted by a resume)."""
    rows = conn.execute(
        f"SELECT {_ROW_SQL}, g.prompt, g.completion, g.raw_completion, g.thinking, g.reward_details, "
        "g.created_at, r.name AS run_name FROM generations g JOIN runs r ON r.id = g.run_id WHERE g.id = ?",
        (generation_id,)).fetchall()
    if not rows:
        return None
    r = rows[0]
    details = _json(r["reward_details"])
    return GenDetail(
        row=_gen_row(r), run_name=r["run_name"], prompt=r["prompt"], completion=r["completion"],
        raw_completion=r["raw_completion"], thinking=r["thinking"],
        reward_details=details if isinstance(details, dict) else {}, created_at=r["created_at"],
        tool_calls=_tool_calls(conn, [generation_id]).get(generation_id, []),
        turns=_turns(conn, generation_id),
        dropped=_dropped(conn, generation_id),
        policy_step=_policy_step(conn, generation_id),
    )


def _policy_step(conn: sqlite3.Connection, generation_id: int) -> int | None:
    """The learner step whose weights sampled the generation; None in a store before version 12."""
    try:
        row = conn.execute("SELECT policy_step FROM generations WHERE id = ?", (generation_id,)).fetchone()
    except sqlite3.OperationalError:  # read-only and not migrated
        return None
    return None if row is None or row[0] is None else int(row[0])


def _dropped(conn: sqlite3.Connection, generation_id: int) -> bool:
    """Whether dynamic sampling dropped the generation's group; False in a store before version 6."""
    try:
        row = conn.execute("SELECT dropped FROM generations WHERE id = ?", (generation_id,)).fetchone()
    except sqlite3.OperationalError:  # read-only and not migrated: no dynamic sampling then
        return False
    return bool(row and row[0])


def _turns(conn: sqlite3.Connection, generation_id: int) -> list[m.Turn]:
    """A generation's turns; none in a store older than version 3 (no column) or for a bad value."""
    try:
        row = conn.execute("SELECT turns FROM generations WHERE id = ?", (generation_id,)).fetchone()
    except sqlite3.OperationalError:  # a store written before agent rollouts: read-only, not migrated
        return []
    if row is None or row[0] is None:
        return []
    try:
        return msgspec.json.decode(row[0], type=list[m.Turn])
    except msgspec.DecodeError:
        return []


def group_filter(row: GenRow) -> GenFilter:
    """The filter showing the G completions of ``row``'s prompt at ``row``'s step, best first."""
    return GenFilter(run_id=row.run_id, step_min=row.step, step_max=row.step, prompt_index=row.prompt_index,
                     sort="reward", descending=True)


def history_filter(row: GenRow) -> GenFilter:
    """The filter showing every visit of ``row``'s prompt (the curriculum's ``prompt_visits``), oldest first."""
    return GenFilter(run_id=row.run_id, history=(row.step, row.prompt_index), sort="step", descending=False)


def run_of_output_dir(conn: sqlite3.Connection, folder: str | Path) -> int:
    """The id of the run whose output folder is ``folder`` (a shared store holds several runs; a
    fork's holds its parent's steps under the fork's own run), else the store's newest run."""
    want = str(Path(folder).resolve())
    newest = None
    for row in conn.execute("SELECT id, config FROM runs ORDER BY id DESC"):
        newest = row["id"] if newest is None else newest
        config = _json(row["config"])
        out = config.get("checkpoint", {}).get("output_dir") if isinstance(config, dict) else None
        if isinstance(out, str) and str(Path(out).resolve()) == want:
            return int(row["id"])
    if newest is None:
        raise StoreError("the store holds no run yet")
    return int(newest)


def step_series(conn: sqlite3.Connection, run_id: int, columns: Sequence[str], after: int = 0) -> list[dict[str, Any]]:
    """``step`` and ``columns`` of a run's steps after step ``after``, by step (compared runs' charts)."""
    known = [c for c in columns if c in STEP_METRIC_COLUMNS]
    sql = f"SELECT {', '.join(['step', *known])} FROM steps WHERE run_id = ? AND step > ? ORDER BY step"
    return [dict(r) for r in conn.execute(sql, (run_id, after))]
