"""Finished run folders written straight to disk, as a worker leaves them: ``run.jsonl`` with its
``init`` and ``step`` frames and a real store (the schema's own migrations, ``step_row``), for the
tests of what reads runs back (compare, its dashboard overlay) without training one."""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Sequence
from pathlib import Path

from grpo_tui.protocol import messages as m
from grpo_tui.protocol.codec import encode
from grpo_tui.protocol.schema import migrate, step_row


def write_run(folder: Path, name: str, rewards: Sequence[float], *, temperature: float = 1.0,
              first_step: int = 1) -> Path:
    """A run named ``name`` whose steps ``first_step``… have these mean rewards (loss 0.1, kl 0.01)."""
    folder.mkdir(parents=True, exist_ok=True)
    config = {"name": name, "model": {"path": str(folder / "model")}, "data": {"path": str(folder / "data.jsonl")},
              "rewards": [{"name": "accuracy"}], "generation": {"temperature": temperature},
              "checkpoint": {"output_dir": str(folder)}}
    steps = [m.Step(step=first_step + i, epoch=0, reward=r, loss=0.1, kl=0.01) for i, r in enumerate(rewards)]
    total = first_step + len(rewards) - 1
    frames = [m.Hello(protocol_version=m.PROTOCOL_VERSION, worker_version="test", pid=0), m.Init(model=name, model_path=str(folder / "model"), config=config, total_steps=total,
                                output_dir=str(folder)), *steps,
              m.Complete(status="completed", total_steps=total, seconds=1.0)]
    (folder / "run.jsonl").write_bytes(b"".join(encode(f) for f in frames))  # type: ignore[arg-type]
    with sqlite3.connect(folder / "outputs.db") as conn:
        migrate(conn)
        now = time.time()
        run_id = conn.execute("INSERT INTO runs (name, model, config, started_at, ended_at, status, total_steps) "
                              "VALUES (?, ?, ?, ?, ?, 'completed', ?)",
                              (name, name, json.dumps(config), now - len(steps), now, total)).lastrowid
        for i, step in enumerate(steps):
            row = {**step_row(step), "run_id": run_id, "created_at": now - len(steps) + i + 1}
            conn.execute(f"INSERT INTO steps ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})",
                         list(row.values()))
    return folder


def add_steps(folder: Path, rewards: Sequence[float]) -> None:
    """More steps in the store of a run written by ``write_run`` (a live run's store growing)."""
    with sqlite3.connect(folder / "outputs.db") as conn:
        run_id, last = conn.execute("SELECT run_id, max(step) FROM steps").fetchone()
        for i, reward in enumerate(rewards):
            row = {**step_row(m.Step(step=last + 1 + i, epoch=0, reward=reward, loss=0.1)), "run_id": run_id,
                   "created_at": time.time()}
            conn.execute(f"INSERT INTO steps ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})",
                         list(row.values()))

