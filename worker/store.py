"""The run store (``<output_dir>/outputs.db``, docs/architecture.md, "Store"), written by the worker only.

One aiosqlite connection in WAL mode. Every step is one ``BEGIN IMMEDIATE`` transaction holding
the step row, all its generations and tool calls, and the logs queued since the previous write,
so a kill at any moment leaves either the whole step or none of it. The schema and its
migrations live in ``protocol/schema.py``, shared with the dashboard's read-only side.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiosqlite
import msgspec

from grpo_tui.common.run_folder import refuse_link
from grpo_tui.protocol import messages as m
from grpo_tui.protocol.layout import STORE_FILE
from grpo_tui.protocol.messages import Aggregates, finite
from grpo_tui.protocol.schema import STEP_TABLES, migrate, step_from_row, step_row
from grpo_tui.worker.trainer_contract import Generation, StepOutput


class StoreDamaged(Exception):
    """The store file fails SQLite's check (a truncated copy, a full disk mid-write); says how."""


def check(path: Path) -> None:
    """``StoreDamaged`` when the store at ``path`` is not a whole SQLite database. ``quick_check``
    reads every page once (about a second per GB), so a damaged page is found here and not in
    the middle of a run."""
    if not path.exists():
        return
    try:
        with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as conn:
            problems = [row[0] for row in conn.execute("PRAGMA quick_check(3)")]
    except sqlite3.DatabaseError as exc:
        raise StoreDamaged(str(exc)) from None
    if problems != ["ok"]:
        raise StoreDamaged("; ".join(problems))


def set_damaged_aside(path: Path) -> Path:
    """Rename a damaged store (and its WAL files) to ``outputs.damaged-<time>.db`` beside it."""
    target = path.with_name(f"{path.stem}.damaged-{time.strftime('%Y%m%d-%H%M%S')}{path.suffix}")
    for suffix in ("", "-wal", "-shm"):
        old = Path(f"{path}{suffix}")
        if old.exists():
            old.rename(Path(f"{target}{suffix}"))
    return target


class Store:
    """Async single writer. Create with ``await Store.open(path)``."""

    def __init__(self, conn: aiosqlite.Connection, path: Path) -> None:
        self._conn = conn
        self.path = path
        self._logs: list[tuple[int | None, str, str, float]] = []

    @classmethod
    async def open(cls, path: Path) -> Store:
        path.parent.mkdir(parents=True, exist_ok=True)
        for file in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
            refuse_link(file)  # SQLite opens these itself: a planted link is refused before it does
        check(path)
        # Schema work happens on a plain connection: ``migrate`` is shared with the dashboard.
        try:
            with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as plain:
                plain.execute("PRAGMA journal_mode=WAL")
                migrate(plain)
        except sqlite3.DatabaseError as exc:  # not a database at all, or damaged where the check did not read
            raise StoreDamaged(str(exc)) from None
        conn = await aiosqlite.connect(path, isolation_level=None)
        await conn.execute("PRAGMA foreign_keys=ON")
        await conn.execute("PRAGMA busy_timeout=5000")
        # WAL + NORMAL: a committed step survives a process kill (not a power cut), cheaply.
        await conn.execute("PRAGMA synchronous=NORMAL")
        return cls(conn, path)

    @classmethod
    async def open_in(cls, output_dir: Path) -> Store:
        """The store of the run folder ``output_dir`` (``protocol/layout.py``'s ``STORE_FILE``)."""
        return await cls.open(output_dir / STORE_FILE)

    @contextlib.asynccontextmanager
    async def _transaction(self) -> AsyncIterator[aiosqlite.Connection]:
        await self._conn.execute("BEGIN IMMEDIATE")
        try:
            yield self._conn
        except BaseException:
            await self._conn.execute("ROLLBACK")
            raise
        await self._conn.execute("COMMIT")

    # ------------------------------------------------------------ runs

    async def mark_abandoned_runs(self, output_dir: str) -> int:
        """Runs of ``output_dir`` left 'running' by a worker that died are marked crashed (the folder's
        lock says none of them is live). A store shared by several runs (``store.path``) keeps the
        other folders' live runs running. Returns how many."""
        async with self._transaction() as db:
            cur = await db.execute(
                "UPDATE runs SET status='crashed', ended_at=coalesce("
                "(SELECT max(created_at) FROM steps WHERE steps.run_id=runs.id), started_at) "
                "WHERE status='running' AND coalesce(json_extract(config, '$.checkpoint.output_dir'), ?) = ?",
                (output_dir, output_dir),
            )
            return cur.rowcount

    async def create_run(
        self, name: str, model: str, model_path: str, config: dict[str, Any], total_steps: int
    ) -> int:
        async with self._transaction() as db:
            cur = await db.execute(
                "INSERT INTO runs (name, model, model_path, config, started_at, status, total_steps) "
                "VALUES (?, ?, ?, ?, ?, 'running', ?)",
                (name, model, model_path, json.dumps(config), time.time(), total_steps),
            )
            return int(cur.lastrowid or 0)

    async def reopen_run(self, run_id: int, step: int, total_steps: int) -> bool:
        """Continue ``run_id`` from ``step``: rows after it are deleted (they will be replayed).
        False when the store has no such run."""
        async with self._transaction() as db:
            cur = await db.execute(
                "UPDATE runs SET status='running', ended_at=NULL, total_steps=? WHERE id=?",
                (total_steps, run_id),
            )
            if cur.rowcount == 0:
                return False
            for table in STEP_TABLES:
                await db.execute(f"DELETE FROM {table} WHERE run_id=? AND step>?", (run_id, step))
        return True

    async def update_run(self, run_id: int, **fields: Any) -> None:
        sets = ", ".join(f"{k}=?" for k in fields)
        async with self._transaction() as db:
            await db.execute(f"UPDATE runs SET {sets} WHERE id=?", (*fields.values(), run_id))

    async def finish_run(self, run_id: int, status: str) -> None:
        """Set the final status and write the logs still queued."""
        async with self._transaction() as db:
            await self._write_logs(db, run_id)
            await db.execute("UPDATE runs SET status=?, ended_at=? WHERE id=?", (status, time.time(), run_id))

    # ------------------------------------------------------------ steps and logs

    def queue_log(self, step: int | None, level: str, message: str) -> None:
        """Logs are written with the next step (or flush) instead of one transaction each."""
        self._logs.append((step, level, message, time.time()))

    async def flush_logs(self, run_id: int) -> None:
        if self._logs:
            async with self._transaction() as db:
                await self._write_logs(db, run_id)

    async def _write_logs(self, db: aiosqlite.Connection, run_id: int) -> None:
        logs, self._logs = self._logs, []
        await db.executemany(
            "INSERT INTO logs (run_id, step, level, message, created_at) VALUES (?, ?, ?, ?, ?)",
            [(run_id, *log) for log in logs],
        )

    async def write_step(self, run_id: int, output: StepOutput) -> None:
        """The step row, every generation and tool call, and queued logs: all or nothing."""
        now = time.time()
        row = step_row(output.metrics)
        row.update(run_id=run_id, created_at=now)
        columns = ", ".join(row)
        async with self._transaction() as db:
            await db.execute(
                f"INSERT INTO steps ({columns}) VALUES ({', '.join('?' * len(row))})", tuple(row.values())
            )
            for gen in output.generations:
                await self._write_generation(db, run_id, output.metrics.step, gen, now)
            await db.executemany(
                "INSERT INTO prompt_visits (run_id, step, prompt_index, prompt_row, passed, pass_rate, state, visits, "
                "created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [(run_id, v.step, v.prompt_index, v.prompt_row, v.passed, v.pass_rate, v.state, v.visits, now)
                 for v in output.prompt_visits],
            )
            await self._write_logs(db, run_id)

    async def write_eval(self, run_id: int, e: m.Eval) -> None:
        """One evaluation pass (replacing an earlier one of the same step and mode: a resume replays it)."""
        async with self._transaction() as db:
            await db.execute(
                "INSERT OR REPLACE INTO evals (run_id, step, reward, accuracy, pass_at_k, rewards, num_prompts, "
                "num_samples, greedy, completion_mean_length, clipped_ratio, seconds, created_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    run_id, e.step, finite(e.reward), finite(e.accuracy), finite(e.pass_at_k), json.dumps(e.rewards),
                    e.num_prompts, e.num_samples, int(e.greedy), finite(e.completion_mean_length),
                    finite(e.clipped_ratio), e.seconds, time.time(),
                ),
            )  # fmt: skip
            await self._write_logs(db, run_id)

    async def evals(self, run_id: int) -> list[m.Eval]:
        """The run's evaluations, oldest first, greedy before sampled (sent again after a resume)."""
        sql = "SELECT step, reward, accuracy, pass_at_k, rewards, num_prompts, num_samples, greedy, seconds FROM evals "
        async with self._conn.execute(sql + "WHERE run_id=? ORDER BY step, greedy DESC", (run_id,)) as cur:
            rows = await cur.fetchall()
        return [
            m.Eval(step=r[0], reward=r[1], accuracy=r[2], pass_at_k=r[3], rewards=json.loads(r[4] or "{}"),
                   num_prompts=r[5], num_samples=r[6], greedy=bool(r[7]), seconds=r[8] or 0.0)
            for r in rows
        ]  # fmt: skip

    async def write_finding(self, run_id: int, finding: m.Finding) -> None:
        """A run doctor's finding as it began, changed severity or cleared (docs/doctor.md)."""
        async with self._transaction() as db:
            await db.execute(
                "INSERT INTO findings (run_id, step, since, name, severity, cleared, message, numbers, evidence, "
                "suggestion, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (run_id, finding.step, finding.since, finding.name, finding.severity, int(finding.cleared),
                 finding.message, json.dumps(finding.numbers), msgspec.json.encode(finding.evidence).decode(),
                 finding.suggestion, time.time()),
            )  # fmt: skip

    async def write_change(self, run_id: int, change: m.SettingChanged) -> None:
        """A live change (docs/steering.md), with the logs queued before it."""
        async with self._transaction() as db:
            await db.execute(
                "INSERT INTO setting_changes (run_id, step, key, old, new, source, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (run_id, change.step, change.key, json.dumps(change.old), json.dumps(change.new), change.source,
                 change.time or time.time()),
            )
            await self._write_logs(db, run_id)

    async def changes(self, run_id: int, after: int = 0) -> list[m.SettingChanged]:
        """The run's live changes that apply from a step after ``after``, in the order they came."""
        sql = "SELECT step, key, old, new, source, created_at FROM setting_changes WHERE run_id=? AND step>? ORDER BY id"
        async with self._conn.execute(sql, (run_id, after)) as cur:
            rows = await cur.fetchall()
        return [m.SettingChanged(step=r[0], key=r[1], old=json.loads(r[2]), new=json.loads(r[3]), source=r[4], time=r[5])
                for r in rows]

    async def _write_generation(
        self, db: aiosqlite.Connection, run_id: int, step: int, gen: Generation, now: float
    ) -> None:
        cur = await db.execute(
            "INSERT INTO generations (run_id, step, prompt_index, group_index, prompt, completion, "
            "raw_completion, thinking, reward, reward_details, advantage, num_tokens, finish_reason, "
            "created_at, reward_notes, turns, dropped, policy_step) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                run_id, step, gen.prompt_index, gen.group_index, gen.prompt, gen.completion,
                gen.raw_completion, gen.thinking, finite(gen.reward), json.dumps(gen.reward_details),
                finite(gen.advantage), gen.num_tokens, gen.finish_reason, now,
                json.dumps(gen.reward_notes) if gen.reward_notes else None,
                msgspec.json.encode(gen.turns).decode() if gen.turns else None, int(gen.dropped),
                step - 1 if gen.policy_step is None else gen.policy_step,
            ),
        )  # fmt: skip
        if gen.tool_calls:
            await db.executemany(
                "INSERT INTO tool_calls (generation_id, call_index, name, arguments, status, error, raw) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                [
                    (cur.lastrowid, c.index, c.name, _json_or_null(c.arguments), c.status, c.error, c.raw)
                    for c in gen.tool_calls
                ],
            )

    # ------------------------------------------------------------ reading back

    async def last_step(self, run_id: int) -> int:
        async with self._conn.execute("SELECT max(step) FROM steps WHERE run_id=?", (run_id,)) as cur:
            row = await cur.fetchone()
        return int(row[0] or 0) if row else 0

    async def history(self, run_id: int, limit: int = m.HISTORY_LIMIT) -> tuple[list[m.Step], Aggregates]:
        """The last ``limit`` steps as ``step`` frames (the length extremes and every completion's reward
        from the step's trained generations, which the steps table leaves to them) and the whole run's
        aggregates, for ``resume_state``."""
        async with self._conn.execute(
            "SELECT * FROM (SELECT * FROM steps WHERE run_id=? ORDER BY step DESC LIMIT ?) ORDER BY step",
            (run_id, limit),
        ) as cur:
            names = [d[0] for d in cur.description]
            rows = [dict(zip(names, r, strict=True)) for r in await cur.fetchall()]
        first = rows[0]["step"] if rows else 0
        lengths: dict[int, tuple[float, float]] = {}
        rewards: dict[int, list[float | None]] = {}
        async with self._conn.execute(
            "SELECT step, num_tokens, reward FROM generations WHERE run_id=? AND step>=? AND dropped=0 ORDER BY id",
            (run_id, first),
        ) as cur:
            async for n, tokens, reward in cur:
                low, high = lengths.get(n, (tokens, tokens))
                lengths[n] = (min(low, tokens), max(high, tokens))
                rewards.setdefault(n, []).append(reward)
        history = []
        for row in rows:
            step = step_from_row(row)
            if step.step in lengths:
                step.completion_min_length, step.completion_max_length = map(float, lengths[step.step])
                step.completion_rewards = rewards[step.step]
            history.append(step)
        async with self._conn.execute(
            "SELECT max(reward), avg(reward), count(reward), min(loss), avg(loss), count(loss), "
            "coalesce(sum(num_tokens), 0), avg(generation_ms), avg(training_ms) FROM steps WHERE run_id=?",
            (run_id,),
        ) as cur:
            agg = await cur.fetchone()
        assert agg is not None
        aggregates = Aggregates(
            best_reward=agg[0], avg_reward=agg[1], reward_steps=agg[2], best_loss=agg[3], avg_loss=agg[4],
            loss_steps=agg[5], total_tokens=int(agg[6]), avg_generation_ms=agg[7], avg_training_ms=agg[8],
        )  # fmt: skip
        return history, aggregates

    async def epoch_metrics(self, run_id: int, epoch: int, upto: int) -> list[tuple[float | None, float | None]]:
        """(loss, reward) of each step of ``epoch`` up to ``upto``: the epoch's summary goes on from them."""
        async with self._conn.execute(
            "SELECT loss, reward FROM steps WHERE run_id=? AND epoch=? AND step<=? ORDER BY step", (run_id, epoch, upto)
        ) as cur:
            return [(r[0], r[1]) for r in await cur.fetchall()]

    async def close(self) -> None:
        # Fold the WAL into the main file so outputs.db alone holds the whole run (a reader that
        # closes after us can't do it: read-only connections never checkpoint).
        try:
            await self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        except Exception:  # noqa: BLE001 - a busy reader only delays the fold; the data is safe in the WAL
            pass
        await self._conn.close()


def _json_or_null(value: Any) -> str | None:
    return None if value is None else json.dumps(value)

