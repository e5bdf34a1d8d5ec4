import os
import sqlite3
import time
from pathlib import Path

import pytest

from grpo_tui.tui.db import open_readonly

from .make_store import build_store


@pytest.fixture(autouse=True)
def utc(monkeypatch):
    """Times on screen are local: pin the zone so text and snapshots don't depend on the machine."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


@pytest.fixture
def store_path(tmp_path) -> Path:
    """Two runs: #1 gsm8k-qwen (12 steps x 8 = 96 generations, completed), #2 gsm8k-lora (4 steps, running)."""
    return build_store(tmp_path / "outputs.db")


@pytest.fixture
def conn(store_path):
    c = open_readonly(store_path)
    yield c
    c.close()


@pytest.fixture
def writer(store_path):
    """A writable connection, playing the worker."""
    c = sqlite3.connect(store_path, isolation_level=None, timeout=5)
    c.execute("PRAGMA journal_mode=WAL")
    yield c
    c.close()


def all_generations(path: Path) -> list[dict]:
    """Every generation with its tool-call statuses, read plainly: the oracle for query tests."""
    c = sqlite3.connect(path)
    c.row_factory = sqlite3.Row
    rows = [dict(r) for r in c.execute("SELECT * FROM generations ORDER BY id")]
    calls: dict[int, list[str]] = {}
    names: dict[int, list[str | None]] = {}
    for gid, status, name in c.execute("SELECT generation_id, status, name FROM tool_calls"):
        calls.setdefault(gid, []).append(status)
        names.setdefault(gid, []).append(name)
    for r in rows:
        r["statuses"] = calls.get(r["id"], [])
        r["tool_names"] = names.get(r["id"], [])
    c.close()
    return rows


os.environ.setdefault("TEXTUAL_ANIMATIONS", "none")
