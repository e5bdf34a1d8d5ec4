"""A store as mlx-node's ``@mlx-node/trl`` writes it (its output_store schema: runs keyed by a text
id, steps, generations pointing at their step's row, parsed tool calls; times in Unix milliseconds)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

TABLES = [
    "training_runs (id TEXT PRIMARY KEY, model_name TEXT NOT NULL, model_path TEXT, config TEXT NOT NULL, "
    "started_at INTEGER NOT NULL, ended_at INTEGER, total_steps INTEGER DEFAULT 0, status TEXT DEFAULT 'running')",
    "training_steps (id INTEGER PRIMARY KEY AUTOINCREMENT, run_id TEXT NOT NULL REFERENCES training_runs(id), "
    "step INTEGER NOT NULL, epoch INTEGER, loss REAL NOT NULL, mean_reward REAL NOT NULL, std_reward REAL NOT NULL, "
    "mean_advantage REAL, total_tokens INTEGER, generation_time_ms REAL, training_time_ms REAL, "
    "gradients_applied INTEGER, created_at INTEGER NOT NULL, UNIQUE(run_id, step))",
    "generations (id INTEGER PRIMARY KEY AUTOINCREMENT, run_id TEXT NOT NULL REFERENCES training_runs(id), "
    "step_id INTEGER NOT NULL REFERENCES training_steps(id), batch_index INTEGER NOT NULL, "
    "group_index INTEGER NOT NULL, prompt TEXT NOT NULL, expected_answer TEXT, completion_text TEXT NOT NULL, "
    "completion_raw TEXT NOT NULL, thinking TEXT, num_tokens INTEGER NOT NULL, finish_reason TEXT NOT NULL, "
    "reward REAL NOT NULL, created_at INTEGER NOT NULL)",
    "tool_calls (id INTEGER PRIMARY KEY AUTOINCREMENT, generation_id INTEGER NOT NULL REFERENCES generations(id), "
    "call_index INTEGER NOT NULL, status TEXT NOT NULL, tool_name TEXT, arguments TEXT, raw_content TEXT NOT NULL, "
    "error_message TEXT)",
]

T0 = 1_764_000_000_000  # Unix milliseconds


def build_mlx_node_store(path: Path, steps: int = 2, group: int = 4) -> Path:
    """One completed run ("qwen3-gsm8k") of ``steps`` steps × ``group`` generations, the last of
    each step calling a tool; the first generation of step 2 says "pineapple"."""
    conn = sqlite3.connect(path)
    for table in TABLES:
        conn.execute(f"CREATE TABLE {table}")
    conn.execute("INSERT INTO training_runs VALUES ('qwen3-gsm8k', 'Qwen3-0.6B', '/models/qwen3', '{\"runName\": \"gsm8k-first\"}', ?, ?, ?, "
                 "'completed')", (T0, T0 + 60_000, steps))
    for step in range(1, steps + 1):
        sid = conn.execute("INSERT INTO training_steps (run_id, step, epoch, loss, mean_reward, std_reward, "
                           "total_tokens, generation_time_ms, training_time_ms, gradients_applied, created_at) "
                           "VALUES ('qwen3-gsm8k', ?, 0, ?, ?, 0.5, 512, 800.0, 300.0, 1, ?)",
                           (step, 0.1 * step, 0.25 * step, T0 + 1000 * step)).lastrowid
        for g in range(group):
            text = "pineapple <answer>4</answer>" if (step, g) == (2, 0) else f"<answer>{g}</answer>"
            gid = conn.execute("INSERT INTO generations (run_id, step_id, batch_index, group_index, prompt, "
                               "expected_answer, completion_text, completion_raw, thinking, num_tokens, finish_reason, "
                               "reward, created_at) VALUES ('qwen3-gsm8k', ?, 0, ?, 'What is 2 + 2?', '4', ?, ?, "
                               "NULL, 7, ?, ?, ?)",
                               (sid, g, text, text, "eos" if g else "length", float(g == 0), T0 + 1000 * step)).lastrowid
            if g == group - 1:
                conn.execute("INSERT INTO tool_calls (generation_id, call_index, status, tool_name, arguments, "
                             "raw_content) VALUES (?, 0, 'ok', 'calculate', '{\"x\": 1}', '<tool_call>…</tool_call>')",
                             (gid,))
    conn.commit()
    conn.close()
    return path
