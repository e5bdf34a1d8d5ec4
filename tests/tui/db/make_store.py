"""Build grpo-tui stores for tests and benchmarks, the way the worker would fill them.

``build_store`` migrates a fresh file with ``protocol.schema.migrate`` and inserts runs, steps,
generations (with tool calls) directly. Everything is deterministic for a given seed, including
timestamps, so snapshots are stable. ``add_steps`` appends more steps to an existing run, which is
what the benchmark's concurrent writer does.
"""

from __future__ import annotations

import json
import random
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from grpo_tui.protocol.schema import STEP_METRIC_COLUMNS, migrate

T0 = 1_767_225_600.0  # 2026-01-01 00:00:00 UTC
WORDS = (
    "the answer is seven because twelve minus five leaves seven apples we add carry one "
    "so total sum equals nine hundred multiply divide check again result banana orange"
).split()
# Text a model could emit that must stay inert on screen.
HOSTILE = "[bold red]not markup[/] \x1b[31mred?\x1b[0m \x1b]0;pwned\x07 done"


@dataclass
class RunSpec:
    name: str
    steps: int = 6
    prompts: int = 2  # prompts per step
    group: int = 4  # completions per prompt (G)
    status: str = "completed"


def _connect(path: str | Path) -> sqlite3.Connection:
    conn = sqlite3.connect(str(path), isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=OFF")
    return conn


def _sentence(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def _generation_rows(rng: random.Random, run_id: int, step: int, spec: RunSpec, now: float):
    """Rows for one step: (generation tuple, list of tool-call tuples) per completion."""
    progress = step / max(spec.steps, 1)
    for p in range(spec.prompts):
        a, b = rng.randint(1, 50), rng.randint(1, 50)
        prompt = f"Question {step}-{p}: what is {a} + {b}? Show your work."
        for g in range(spec.group):
            correct = rng.random() < 0.2 + 0.7 * progress
            finish = "length" if rng.random() < 0.1 else ("repetition" if rng.random() < 0.03 else "stop")
            answer = a + b if correct else a + b + rng.randint(1, 9)
            body = f"{_sentence(rng, 8)}\nThe answer is {answer}."
            if step == 1 and p == 0 and g == 1:
                body = HOSTILE + "\n" + body
            thinking = f"Let me think: {_sentence(rng, 12)}" if g % 2 == 0 else None
            calls = []
            if g == spec.group - 1:
                status = ("ok", "invalid_json", "missing_name")[(step + p) % 3]
                calls.append((0, "calculator" if status != "missing_name" else None,
                              json.dumps({"expr": f"{a}+{b}"}) if status == "ok" else None, status,
                              None if status == "ok" else f"{status.replace('_', ' ')} in tool call",
                              f'<tool_call>{{"name": "calculator", "arguments": "{a}+{b}"}}</tool_call>'))
            details = {"correctness": 1.0 if correct else 0.0, "format": 0.5 if finish == "stop" else 0.0}
            reward = details["correctness"] + details["format"]
            raw = (f"<think>{thinking}</think>" if thinking else "") + body
            gen = (run_id, step, p, g, prompt, body, raw, thinking, reward, json.dumps(details), None,
                   rng.randint(20, 200), finish, now)
            yield gen, calls


def _insert_step(conn: sqlite3.Connection, rng: random.Random, run_id: int, step: int, spec: RunSpec,
                 now: float) -> None:
    rows = list(_generation_rows(rng, run_id, step, spec, now))
    # Advantages: reward minus the group mean, like GRPO (scaled by std is not needed for fixtures).
    for p in range(spec.prompts):
        group = rows[p * spec.group:(p + 1) * spec.group]
        mean = sum(r[0][8] for r in group) / len(group)
        for i, (gen, calls) in enumerate(group):
            group[i] = (gen[:10] + (round(gen[8] - mean, 4),) + gen[11:], calls)
        rows[p * spec.group:(p + 1) * spec.group] = group
    rewards = [r[0][8] for r in rows]
    mean = sum(rewards) / len(rewards)
    metrics = {c: None for c in STEP_METRIC_COLUMNS}
    metrics.update(
        loss=round(0.9 / (1 + step * 0.2) + rng.uniform(-0.02, 0.02), 5), reward=round(mean, 5),
        reward_std=round((sum((r - mean) ** 2 for r in rewards) / len(rewards)) ** 0.5, 5),
        rewards=json.dumps({"correctness": round(mean - 0.4, 4), "format": 0.45}), kl=round(0.001 * step, 5),
        num_tokens=sum(r[0][11] for r in rows), completion_mean_length=sum(r[0][11] for r in rows) / len(rows),
        learning_rate=1e-5, gradients_applied=1.0, training_ms=120.0 + step, generation_ms=800.0 + step,
    )
    cols = ["run_id", "step", "epoch", *STEP_METRIC_COLUMNS, "created_at"]
    conn.execute(f"INSERT INTO steps ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",
                 [run_id, step, 0, *(metrics[c] for c in STEP_METRIC_COLUMNS), now])
    for gen, calls in rows:
        cur = conn.execute(
            "INSERT INTO generations (run_id, step, prompt_index, group_index, prompt, completion, raw_completion,"
            " thinking, reward, reward_details, advantage, num_tokens, finish_reason, created_at)"
            " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)", gen)
        if calls:
            conn.executemany("INSERT INTO tool_calls (generation_id, call_index, name, arguments, status, error, raw)"
                             " VALUES (?,?,?,?,?,?,?)", [(cur.lastrowid, *c) for c in calls])


def add_steps(conn: sqlite3.Connection, run_id: int, spec: RunSpec, first: int, count: int, seed: int = 0) -> None:
    """Append ``count`` steps starting at ``first`` to run ``run_id`` in one transaction per 50 steps."""
    rng = random.Random(seed * 1_000_003 + run_id * 7919 + first)
    for start in range(first, first + count, 50):
        conn.execute("BEGIN IMMEDIATE")
        for step in range(start, min(start + 50, first + count)):
            _insert_step(conn, rng, run_id, step, spec, T0 + run_id * 86_400 + step * 10.0)
        conn.execute("COMMIT")


def build_store(path: str | Path, runs: list[RunSpec] | None = None, seed: int = 0) -> Path:
    """A store with ``runs`` (default: two small runs), steps numbered from 1."""
    runs = runs if runs is not None else [RunSpec("gsm8k-qwen", steps=12), RunSpec("gsm8k-lora", steps=4, status="running")]
    conn = _connect(path)
    migrate(conn)
    for i, spec in enumerate(runs, start=1):
        started = T0 + i * 86_400
        ended = None if spec.status == "running" else started + spec.steps * 10.0 + 5
        conn.execute(
            "INSERT INTO runs (id, name, model, model_path, config, started_at, ended_at, status, total_steps)"
            " VALUES (?,?,?,?,?,?,?,?,?)",
            (i, spec.name, "demo-tiny", "examples/demo-model", json.dumps({"grpo": {"group_size": spec.group}}),
             started, ended, spec.status, spec.steps))
        add_steps(conn, i, spec, 1, spec.steps, seed)
    conn.close()
    return Path(path)
