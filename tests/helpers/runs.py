"""Runs started the way a user starts them (``grpo-tui run CONFIG --detach``), for the long-run and web tests."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from grpo_tui.protocol import control as c
from tests.helpers.worker_harness import write_config

CLI = [sys.executable, "-m", "grpo_tui.tui.cli"]


def start_detached(
    tmp_path: Path, model: Path, steps: int = 400, env: dict[str, str] | None = None, args: tuple[str, ...] = (),
) -> tuple[Path, str]:
    """``grpo-tui run CONFIG --detach [ARGS]``: returns the run folder and the attach command it printed."""
    config = write_config(tmp_path, model, training={"max_steps": steps, "num_epochs": 200, "silent_patience": 0},
                          checkpoint={"save_every": 0})  # the tiny model ties every group: no silent stop
    began = time.monotonic()
    done = subprocess.run(
        [*CLI, "run", str(config), "--detach", *args], capture_output=True, text=True, timeout=60,
        env={**os.environ, **(env or {})},
    )
    assert done.returncode == 0, done.stderr
    assert time.monotonic() - began < 20  # it returns at once (it waits for the socket, not for a step)
    out = (tmp_path / "out").resolve()
    assert f"Run folder: {out}" in done.stdout
    [attach] = [line for line in done.stdout.splitlines() if line.startswith("Attach: ")]
    record = c.read_record(out)
    assert record is not None and c.pid_alive(record.pid)
    from grpo_tui.tui.launcher import adopt

    adopt(record.pid)  # ended by the autouse fixture if the test fails half-way
    return out, attach.removeprefix("Attach: ")


def wait_for(condition, timeout: float = 120.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.1)


def record_step(out: Path) -> int:
    record = c.read_record(out)
    return record.step if record else 0


def thread_nices(pid: int) -> set[int]:
    """The nice value of every thread of ``pid`` (Linux: each thread has its own)."""
    nices = set()
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                nices.add(int(f.read().rsplit(") ", 1)[1].split()[16]))  # field 19: nice
        except (FileNotFoundError, ProcessLookupError):
            pass
    return nices
