"""The run's record, ``.control/supervisor.json`` (``protocol.control.RunRecord``), kept by its supervisor.

``grpo-tui ls`` and ``attach`` read it: the run's status, step, last reward, worker, viewers and
restarts. The supervisor sets what it decides (status, exit, restarts, viewers); the worker's frames
set the rest (``on_event``). Steps are written at most once a ``RECORD_EVERY_S``, and the last of a
burst a moment later. Like the supervisor, it imports no Textual and no MLX.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from pathlib import Path

from grpo_tui.protocol import control as c
from grpo_tui.protocol import messages as m
from grpo_tui.protocol.layout import RUN_LOG_FILE

RECORD_EVERY_S = 1.0  # supervisor.json is rewritten at most this often for steps


def set_items(worker_argv: list[str]) -> list[str]:
    """The ``--set KEY=VALUE`` items of the worker's command line: the run's overrides of its config."""
    return [worker_argv[i + 1] for i, arg in enumerate(worker_argv[:-1]) if arg == "--set"]


class RecordKeeper:
    """Owns ``record`` and writes it whenever it changes (a write that fails is skipped: the next one
    tries again)."""

    def __init__(self, out: Path, config: str, worker_argv: list[str]) -> None:
        jsonl = out / RUN_LOG_FILE
        self.record = c.RunRecord(
            pid=os.getpid(), output_dir=str(out), config=config, overrides=set_items(worker_argv),
            started_at=time.time(),
            jsonl_offset=jsonl.stat().st_size if jsonl.exists() else 0,  # where this run's frames begin
        )
        self._recorded_at = 0.0
        self._due = False

    def update(self, **changes: object) -> None:
        for key, value in changes.items():
            setattr(self.record, key, value)
        with contextlib.suppress(OSError):
            c.write_record(self.record)
        self._recorded_at = time.monotonic()

    def _flush(self) -> None:
        self._due = False
        self.update()

    def on_event(self, event: m.Event) -> None:
        """What a worker frame changes in the record."""
        match event:
            case m.Init():
                self.update(total_steps=event.total_steps)
            case m.ResumeState():  # the live changes it goes on with; the later ones are applied again
                self.update(step=event.step, status="running", changes=len(event.changes))
            case m.SettingChanged():
                self.update(changes=self.record.changes + 1, total_steps=event.total_steps or self.record.total_steps)
            case m.Step():
                self.record.step, self.record.last_reward = event.step, m.finite(event.reward)
                if self.record.status in ("starting", "restarting"):
                    self.record.status = "running"
                if time.monotonic() - self._recorded_at >= RECORD_EVERY_S:
                    self.update()
                elif not self._due:  # the last step of a burst is written too, a moment later
                    self._due = True
                    asyncio.get_running_loop().call_later(RECORD_EVERY_S, self._flush)
            case m.Paused():
                self.update(status="paused", step=event.step)
            case m.Resumed():
                self.update(status="running", step=event.step)
            case _:
                pass
