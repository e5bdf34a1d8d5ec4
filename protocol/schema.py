"""The SQLite store (``<output_dir>/outputs.db``; docs/architecture.md, "Store"): schema, version and
forward migrations.

The worker is the only writer; the dashboard reads through ``file:…?mode=ro``. Both use this
module so the two sides can never disagree about a column.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any

import msgspec

from grpo_tui.protocol.messages import Step

APPLICATION_ID = "grpo-tui"
SCHEMA_VERSION = 12

# Fields of the ``step`` message that are not stored: each completion's reward is in the
# generations table anyway; the length extremes are live-only.
NOT_STORED = ("completion_min_length", "completion_max_length", "completion_rewards")

# Metric columns of ``steps``: every stored field of the ``step`` message, clip_ratio flattened, the
# per-function reward means, the reward functions' logged metrics and per-rank timings as JSON.
STEP_METRIC_COLUMNS: tuple[str, ...] = tuple(
    c
    for f in Step.__struct_fields__
    if f not in ("step", "epoch", *NOT_STORED)
    for c in (("clip_ratio_low", "clip_ratio_high", "clip_ratio_region") if f == "clip_ratio" else (f,))
)

JSON_STEP_COLUMNS = ("rewards", "extra_metrics", "ranks")
# The tables whose rows belong to a step of a run: a resume from step N (and a fork at N) drops their
# rows after N (tool_calls and the search index follow generations by cascade and triggers).
STEP_TABLES = ("generations", "steps", "logs", "evals", "setting_changes", "findings", "prompt_visits")
# Version 1's steps columns, frozen: a field added to ``Step`` later arrives by a migration.
_LATER_STEP_COLUMNS = ("extra_metrics", "ranks", "slowest_rank", "all_reduce_bytes", "perplexity", "token_accuracy")
_V1_STEP_COLUMNS = tuple(c for c in STEP_METRIC_COLUMNS if c not in _LATER_STEP_COLUMNS)

_V1 = f"""
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE runs (
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    model TEXT,
    model_path TEXT,
    config TEXT,
    started_at REAL NOT NULL,
    ended_at REAL,
    status TEXT NOT NULL DEFAULT 'running'
        CHECK (status IN ('running', 'completed', 'stopped', 'crashed')),
    total_steps INTEGER
);
CREATE TABLE steps (
    id INTEGER PRIMARY KEY,
    run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    step INTEGER NOT NULL,
    epoch INTEGER NOT NULL,
    {", ".join(f"{c} {'TEXT' if c in ('rewards', 'skipped_reason') else 'REAL'}" for c in _V1_STEP_COLUMNS)},
    created_at REAL NOT NULL,
    UNIQUE (run_id, step)
);
CREATE TABLE generations (
    id INTEGER PRIMARY KEY,
    run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    step INTEGER NOT NULL,
    prompt_index INTEGER NOT NULL,
    group_index INTEGER NOT NULL,
    prompt TEXT NOT NULL,
    completion TEXT NOT NULL,
    raw_completion TEXT NOT NULL,
    thinking TEXT,
    reward REAL,
    reward_details TEXT,
    advantage REAL,
    num_tokens INTEGER NOT NULL DEFAULT 0,
    finish_reason TEXT NOT NULL,
    created_at REAL NOT NULL
);
CREATE TABLE tool_calls (
    id INTEGER PRIMARY KEY,
    generation_id INTEGER NOT NULL REFERENCES generations(id) ON DELETE CASCADE,
    call_index INTEGER NOT NULL,
    name TEXT,
    arguments TEXT,
    status TEXT NOT NULL,
    error TEXT,
    raw TEXT
);
CREATE TABLE logs (
    id INTEGER PRIMARY KEY,
    run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    step INTEGER,
    level TEXT NOT NULL,
    message TEXT NOT NULL,
    created_at REAL NOT NULL
);
CREATE INDEX steps_run_step ON steps (run_id, step);
CREATE INDEX generations_run_step ON generations (run_id, step, id);
CREATE INDEX generations_run_reward ON generations (run_id, reward, id);
CREATE INDEX generations_run_finish ON generations (run_id, finish_reason, id);
CREATE INDEX tool_calls_generation ON tool_calls (generation_id);
CREATE INDEX tool_calls_status ON tool_calls (status, generation_id);
CREATE INDEX logs_run ON logs (run_id, id);
CREATE VIRTUAL TABLE generations_fts USING fts5(
    prompt, completion, thinking, content='generations', content_rowid='id'
);
CREATE TRIGGER generations_ai AFTER INSERT ON generations BEGIN
    INSERT INTO generations_fts (rowid, prompt, completion, thinking)
    VALUES (new.id, new.prompt, new.completion, coalesce(new.thinking, ''));
END;
CREATE TRIGGER generations_ad AFTER DELETE ON generations BEGIN
    INSERT INTO generations_fts (generations_fts, rowid, prompt, completion, thinking)
    VALUES ('delete', old.id, old.prompt, old.completion, coalesce(old.thinking, ''));
END;
"""

# Held-out evaluations (``eval`` frames), one row per evaluation; version 7 keys them by greedy too.
_EVAL_COLUMNS = """
    id INTEGER PRIMARY KEY,
    run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    step INTEGER NOT NULL,
    reward REAL,
    accuracy REAL,
    pass_at_k REAL,
    rewards TEXT,
    num_prompts INTEGER NOT NULL,
    num_samples INTEGER NOT NULL,
    greedy INTEGER NOT NULL,
    completion_mean_length REAL,
    clipped_ratio REAL,
    seconds REAL,
    created_at REAL NOT NULL,
"""
_V2 = f"CREATE TABLE evals ({_EVAL_COLUMNS}    UNIQUE (run_id, step)\n);"

# What reward functions log: scalar means per step (log_metric), notes per generation (log_extra).
_V3 = """
ALTER TABLE steps ADD COLUMN extra_metrics TEXT;
ALTER TABLE generations ADD COLUMN reward_notes TEXT;
"""

# Several ranks: each rank's timings (JSON), the slowest rank, the bytes one rank all-reduced.
_V4 = """
ALTER TABLE steps ADD COLUMN ranks TEXT;
ALTER TABLE steps ADD COLUMN slowest_rank REAL;
ALTER TABLE steps ADD COLUMN all_reduce_bytes REAL;
"""

# Agent rollouts ([[tools]]): each generation's conversation turn by turn, as a JSON array of
# ``messages.Turn`` (assistant text; tool name, arguments, result or error, seconds). NULL otherwise.
_V5 = """
ALTER TABLE generations ADD COLUMN turns TEXT;
"""

# Dynamic sampling (grpo.dynamic_sampling): 1 on a generation whose group was dropped (all its
# rewards equal) and not trained on; the Database tab filters on it.
_V6 = """
ALTER TABLE generations ADD COLUMN dropped INTEGER NOT NULL DEFAULT 0;
"""

# eval.also_sampled: an evaluation may make a greedy and a sampled pass at the same step, one row
# each. SQLite cannot change a UNIQUE constraint in place: the table is rebuilt with the same rows.
_V7 = f"""
CREATE TABLE evals_v7 ({_EVAL_COLUMNS}    UNIQUE (run_id, step, greedy)
);
INSERT INTO evals_v7 SELECT id, run_id, step, reward, accuracy, pass_at_k, rewards, num_prompts, num_samples, greedy,
    completion_mean_length, clipped_ratio, seconds, created_at FROM evals;
DROP TABLE evals;
ALTER TABLE evals_v7 RENAME TO evals;
"""

# Live changes (docs/steering.md): a setting changed while the run trained, applying from ``step``
# on; ``old`` and ``new`` as JSON, ``source`` who asked (dashboard, cli, api, stdin, doctor).
_V8 = """
CREATE TABLE setting_changes (
    id INTEGER PRIMARY KEY,
    run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    step INTEGER NOT NULL,
    key TEXT NOT NULL,
    old TEXT,
    new TEXT,
    source TEXT NOT NULL,
    created_at REAL NOT NULL
);
CREATE INDEX setting_changes_run ON setting_changes (run_id, step);
"""

# The completions' perplexity and token accuracy under the policy (mlx-node records both).
_V9 = """
ALTER TABLE steps ADD COLUMN perplexity REAL;
ALTER TABLE steps ADD COLUMN token_accuracy REAL;
"""

# The run doctor's findings (docs/doctor.md): each time one begins, changes severity or clears.
_V10 = """
CREATE TABLE findings (
    id INTEGER PRIMARY KEY,
    run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    step INTEGER NOT NULL,
    since INTEGER NOT NULL,
    name TEXT NOT NULL,
    severity TEXT NOT NULL,
    cleared INTEGER NOT NULL DEFAULT 0,
    message TEXT NOT NULL,
    numbers TEXT,
    evidence TEXT,
    suggestion TEXT,
    created_at REAL NOT NULL
);
CREATE INDEX findings_run ON findings (run_id, step);
"""

# The curriculum ([curriculum], docs/curriculum.md): each visit of a prompt (its group in a step, the
# generations of (run_id, step, prompt_index)), the share of its completions that passed, its decayed
# pass rate and state after it. ``prompts`` is each prompt's latest: visits, pass rate, state, last step
# (a view, so a resume that drops the visits after its step drops them from it too).
_V11 = """
CREATE TABLE prompt_visits (
    id INTEGER PRIMARY KEY,
    run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    step INTEGER NOT NULL,
    prompt_index INTEGER NOT NULL,
    prompt_row INTEGER NOT NULL,
    passed REAL NOT NULL,
    pass_rate REAL NOT NULL,
    state TEXT NOT NULL,
    visits INTEGER NOT NULL,
    created_at REAL NOT NULL
);
CREATE INDEX prompt_visits_run_step ON prompt_visits (run_id, step, prompt_index);
CREATE INDEX prompt_visits_run_row ON prompt_visits (run_id, prompt_row, id);
CREATE VIEW prompts AS
    SELECT run_id, prompt_row, COUNT(*) AS visits, MAX(id) AS last_visit, step AS last_step, pass_rate, state
    FROM prompt_visits GROUP BY run_id, prompt_row;
"""

# Asynchronous GRPO ([async], docs/async.md): the learner step whose weights sampled each generation
# (step - 1 in a synchronous run; up to async.max_staleness less in an asynchronous one). NULL: a
# generation stored before the column.
_V12 = """
ALTER TABLE generations ADD COLUMN policy_step INTEGER;
"""

# MIGRATIONS[v] upgrades a store at version v-1 to version v. Append, never edit.
MIGRATIONS: dict[int, str] = {1: _V1, 2: _V2, 3: _V3, 4: _V4, 5: _V5, 6: _V6, 7: _V7, 8: _V8, 9: _V9, 10: _V10, 11: _V11,
                              12: _V12}


class StoreError(RuntimeError):
    """A file that cannot be used as a grpo-tui store (not one, or from a newer version)."""


def read_schema_version(conn: sqlite3.Connection) -> int:
    """0 for an empty database; raises ``StoreError`` for a non-grpo-tui database."""
    try:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    except sqlite3.DatabaseError as exc:
        raise StoreError(f"not an SQLite database ({exc})") from None
    if not tables:
        return 0
    if "meta" not in tables:
        raise StoreError("not a grpo-tui store (no meta table)")
    rows = dict(conn.execute("SELECT key, value FROM meta").fetchall())
    if rows.get("application") != APPLICATION_ID:
        raise StoreError("not a grpo-tui store")
    return int(rows.get("schema_version", 0))


def check_readable(conn: sqlite3.Connection) -> int:
    """The schema version of an existing store; ``StoreError`` if this version can't read it."""
    version = read_schema_version(conn)
    if version == 0:
        raise StoreError("not a grpo-tui store (empty database)")
    if version > SCHEMA_VERSION:
        raise StoreError(
            f"store schema version {version} is newer than this grpo-tui understands "
            f"({SCHEMA_VERSION}); upgrade grpo-tui"
        )
    return version


def migrate(conn: sqlite3.Connection) -> int:
    """Bring a store (possibly empty) up to ``SCHEMA_VERSION``. Returns the version."""
    version = read_schema_version(conn)
    if version > SCHEMA_VERSION:
        check_readable(conn)
    for target in range(version + 1, SCHEMA_VERSION + 1):
        script = MIGRATIONS[target]
        conn.executescript(
            "BEGIN IMMEDIATE;\n"
            + script
            + f"\nINSERT OR REPLACE INTO meta VALUES ('application', '{APPLICATION_ID}');"
            + f"\nINSERT OR REPLACE INTO meta VALUES ('schema_version', '{target}');\nCOMMIT;"
        )
    return SCHEMA_VERSION


def step_row(step: Step) -> dict[str, Any]:
    """A ``step`` message as a ``steps`` row (without run_id / created_at)."""
    row: dict[str, Any] = {"step": step.step, "epoch": step.epoch}
    for field in Step.__struct_fields__:
        if field in ("step", "epoch", *NOT_STORED):
            continue
        value = getattr(step, field)
        if field == "clip_ratio":
            row.update(clip_ratio_low=value.low, clip_ratio_high=value.high, clip_ratio_region=value.region)
        elif field in JSON_STEP_COLUMNS:
            row[field] = json.dumps(msgspec.to_builtins(value))
        elif field == "gradients_applied":
            row[field] = 1.0 if value else 0.0
        else:
            row[field] = value
    return row


def step_from_row(row: dict[str, Any]) -> Step:
    """A ``steps`` row back as a ``step`` message (what the store keeps of it; ``step_row``'s inverse)."""
    fields: dict[str, Any] = {"step": row["step"], "epoch": row.get("epoch") or 0}
    for column in STEP_METRIC_COLUMNS:
        value = row.get(column)
        if value is None or column.startswith("clip_ratio_"):
            continue
        if column in JSON_STEP_COLUMNS:
            value = json.loads(value)
        elif column == "gradients_applied":
            value = bool(value)
        fields[column] = value
    clip = {part: row.get(f"clip_ratio_{part}") for part in ("low", "high", "region")}
    return msgspec.convert({**fields, "clip_ratio": clip}, Step, strict=False)
