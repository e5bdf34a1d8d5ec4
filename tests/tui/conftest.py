"""Helpers for driving the dashboard against the scripted fake worker."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from grpo_tui.protocol.config import Config, parse_config
from grpo_tui.tui.app import GrpoApp

FAKE_WORKER = Path(__file__).resolve().parent.parent / "helpers" / "fake_worker.py"
FROZEN = 1000.0  # a clock that never moves: elapsed shows 0s in every snapshot

CONFIG = """
name = "fake-run"
[model]
path = "models/tiny"
[data]
path = "data/train.jsonl"
[[rewards]]
name = "accuracy"
[checkpoint]
output_dir = "{output_dir}"
[display]
sample_display = "best_worst"
restart_delay_s = {delay}
max_restarts = {max_restarts}
"""


def make_config(output_dir: Path, delay: float = 0.3, max_restarts: int = 2, eval_every: int = 0) -> Config:
    text = CONFIG.format(output_dir=output_dir, delay=delay, max_restarts=max_restarts)
    if eval_every:
        text += f"[eval]\nevery = {eval_every}\n"
    return parse_config(text, base_dir=output_dir, check_paths=False)


def fake_argv(*options: str) -> list[str]:
    return [sys.executable, str(FAKE_WORKER), *options]


def build_app(
    folder: Path, *options: str, delay: float = 0.3, max_restarts: int = 2, eval_every: int = 0, **kwargs: object
) -> GrpoApp:
    """An app wired to the fake worker (with ``options``), its run folder in ``folder``, clock frozen;
    ``eval_every`` adds an ``[eval]`` table (pass the fake ``--eval-every`` too)."""
    config = make_config(folder, delay, max_restarts, eval_every)
    argv = fake_argv("--output-dir", str(folder), *options)
    kwargs.setdefault("clock", lambda: FROZEN)
    return GrpoApp(str(folder / "config.toml"), config, worker_argv=argv, **kwargs)  # type: ignore[arg-type]


@pytest.fixture
def make_app(tmp_path: Path) -> Callable[..., GrpoApp]:
    """``make_app("--steps", "5", delay=0.3, ...)``: ``build_app`` in the test's tmp_path."""
    return lambda *options, **kwargs: build_app(tmp_path, *options, **kwargs)


async def wait_until(pilot, condition: Callable[[], bool], timeout: float = 15.0) -> None:  # type: ignore[no-untyped-def]
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not condition():
        if loop.time() > deadline:
            raise AssertionError("condition not met in time")
        await pilot.pause(0.05)
    await pilot.pause(0.3)  # one more flush so every widget shows the state


def process_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    # a zombie still answers kill(0); it is gone as far as the user is concerned once reaped
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1].startswith("Z")
    except (FileNotFoundError, IndexError):
        return True
