"""mlx-node's output store (``@mlx-node/trl``'s ``outputs.db``) read as a grpo-tui store.

mlx-node's schema (its ``crates/mlx-core/src/output_store/schema.rs``, ``CREATE_TABLES_SQL``) has
``training_runs``, ``training_steps``, ``generations`` and ``tool_calls``. ``grpo-tui browse`` reads
it read-only and copies its rows into a fresh grpo-tui store in a temporary folder, which the
Database view then browses and searches like one of ours; the mlx-node file is never written.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from urllib.parse import quote

from grpo_tui.protocol.schema import StoreError, migrate

MLX_NODE_TABLES = {"training_runs", "training_steps", "generations", "tool_calls"}

# mlx-node's run status -> ours (runs.status's CHECK allows running, completed, stopped, crashed)
_STATUS = {"running": "running", "completed": "completed", "complete": "completed", "stopped": "stopped",
           "paused": "stopped", "failed": "crashed", "crashed": "crashed", "error": "crashed"}
# mlx-node's tool call parse status -> ours (messages.ToolCallStatus)
_TOOL_STATUS = {"ok": "ok", "json_error": "invalid_json", "parse_error": "missing_name"}


def _connect_readonly(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(f"file:{quote(str(path.resolve()))}?mode=ro", uri=True)
    conn.execute("PRAGMA query_only = 1")
    return conn


def is_mlx_node_store(path: str | Path) -> bool:
    """True for an SQLite file with mlx-node's tables and without grpo-tui's ``meta``."""
    try:
        conn = _connect_readonly(Path(path))
        try:
            tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        finally:
            conn.close()
    except sqlite3.DatabaseError:
        return False
    return MLX_NODE_TABLES <= tables and "meta" not in tables


def copy_as_grpo_store(source: str | Path, dest: str | Path) -> Path:
    """Copy mlx-node store ``source`` into a new grpo-tui store ``dest``; returns ``dest``."""
    src = _connect_readonly(Path(source))
    out = sqlite3.connect(str(dest), isolation_level=None)
    try:
        migrate(out)
        out.execute("BEGIN")
        run_ids = _copy_runs(src, out)
        step_numbers = _copy_steps(src, out, run_ids)
        _copy_generations(src, out, run_ids, step_numbers)
        out.execute("COMMIT")
    except sqlite3.DatabaseError as exc:
        raise StoreError(f"{source}: an mlx-node store that cannot be read ({exc})") from None
    finally:
        src.close()
        out.close()
    return Path(dest)


def _seconds(ms: float | None) -> float | None:
    """mlx-node stores times as Unix milliseconds; ours are seconds."""
    return None if ms is None else ms / 1000.0


def _run_name(config: str | None) -> str | None:
    """The name mlx-node's trainer config gave the run (``runName``), kept in its ``config`` column;
    its ``id`` is what it keys the run by."""
    try:
        parsed = json.loads(config or "{}")
    except ValueError:
        return None
    if not isinstance(parsed, dict):
        return None
    name = parsed.get("runName") or parsed.get("run_name")
    return str(name) if isinstance(name, (str, int)) and str(name).strip() else None


def _copy_runs(src: sqlite3.Connection, out: sqlite3.Connection) -> dict[str, int]:
    ids: dict[str, int] = {}
    rows = src.execute("SELECT id, model_name, model_path, config, started_at, ended_at, total_steps, status "
                       "FROM training_runs ORDER BY started_at, id")
    for run, model, model_path, config, started, ended, total, status in rows:
        name = _run_name(config)
        cur = out.execute(
            "INSERT INTO runs (name, model, model_path, config, started_at, ended_at, status, total_steps) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (f"{name} ({run})" if name and name != str(run) else str(run), model, model_path, config,
             _seconds(started) or 0.0, _seconds(ended),
             _STATUS.get(str(status or "").lower(), "stopped"), total),
        )  # fmt: skip
        ids[str(run)] = int(cur.lastrowid or 0)
    return ids


def _copy_steps(src: sqlite3.Connection, out: sqlite3.Connection, run_ids: dict[str, int]) -> dict[int, int]:
    """Returns mlx-node's step row id -> the step number (its generations point at the row)."""
    numbers: dict[int, int] = {}
    rows = src.execute("SELECT id, run_id, step, epoch, loss, mean_reward, std_reward, total_tokens, "
                       "generation_time_ms, training_time_ms, gradients_applied, created_at FROM training_steps")
    for sid, run, step, epoch, loss, reward, std, tokens, gen_ms, train_ms, applied, created in rows:
        if str(run) not in run_ids:
            continue
        numbers[int(sid)] = int(step)
        out.execute(
            "INSERT INTO steps (run_id, step, epoch, loss, reward, reward_std, num_tokens, generation_ms, training_ms, "
            "gradients_applied, rewards, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, '{}', ?)",
            (run_ids[str(run)], step, epoch or 0, loss, reward, std, tokens, gen_ms, train_ms,
             None if applied is None else float(bool(applied)), _seconds(created) or 0.0),
        )  # fmt: skip
    return numbers


def _copy_generations(src: sqlite3.Connection, out: sqlite3.Connection, run_ids: dict[str, int],
                      step_numbers: dict[int, int]) -> None:
    new_ids: dict[int, int] = {}
    rows = src.execute("SELECT id, run_id, step_id, batch_index, group_index, prompt, completion_text, completion_raw, "
                       "thinking, num_tokens, finish_reason, reward, created_at FROM generations ORDER BY id")
    for gid, run, step_id, batch, group, prompt, text, raw, thinking, tokens, finish, reward, created in rows:
        if str(run) not in run_ids or step_id not in step_numbers:
            continue
        cur = out.execute(
            "INSERT INTO generations (run_id, step, prompt_index, group_index, prompt, completion, raw_completion, "
            "thinking, reward, num_tokens, finish_reason, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (run_ids[str(run)], step_numbers[step_id], batch, group, prompt, text, raw, thinking, reward, tokens,
             "stop" if finish == "eos" else finish, _seconds(created) or 0.0),
        )  # fmt: skip
        new_ids[int(gid)] = int(cur.lastrowid or 0)
    for gen, index, status, name, arguments, raw, error in src.execute(
        "SELECT generation_id, call_index, status, tool_name, arguments, raw_content, error_message FROM tool_calls"
    ):
        if gen in new_ids:
            out.execute("INSERT INTO tool_calls (generation_id, call_index, name, arguments, status, error, raw) "
                        "VALUES (?, ?, ?, ?, ?, ?, ?)",
                        (new_ids[gen], index, name, arguments, _TOOL_STATUS.get(status, status), error, raw))
