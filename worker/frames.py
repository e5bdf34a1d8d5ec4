"""The worker's output: protocol frames on a reserved stdout, plain lines, and ``run.jsonl``.

The real stdout is reserved for frames at the file-descriptor level: fd 1 is duplicated for the
frame writer, then fd 1 is pointed at stderr. A stray ``print`` from a reward function, or output
from native code writing to fd 1, then lands on stderr and can never corrupt the frame stream.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import BinaryIO

from grpo_tui.common.run_folder import open_append
from grpo_tui.protocol import messages as m
from grpo_tui.protocol.codec import encode
from grpo_tui.protocol.outcome import Exit


def reserve_stdout() -> int:
    """Return a private fd on the original stdout and point fd 1 at stderr."""
    sys.stdout.flush()
    frames_fd = os.dup(1)  # non-inheritable: child processes of rewards never see it
    os.dup2(2, 1)
    return frames_fd


def _fmt(value: float | None, spec: str = ".4f") -> str:
    return "-" if value is None else format(value, spec)


def format_plain(event: m.Event, total_steps: int = 0) -> str | None:
    """One human-readable line for an event, or None for events plain mode leaves out."""
    if isinstance(event, m.Step):
        per_reward = " ".join(f"{k} {_fmt(v, '.3f')}" for k, v in event.rewards.items())
        seconds = sum(x or 0.0 for x in (event.generation_ms, event.scoring_ms, event.training_ms)) / 1000
        of = f"/{total_steps}" if total_steps else ""
        skipped = f" | SKIPPED ({event.skipped_reason})" if not event.gradients_applied else ""
        return (
            f"step {event.step}{of} | loss {_fmt(event.loss)} | reward {_fmt(event.reward, '.3f')}"
            f" | {per_reward} | {seconds:.2f} s/step | {_fmt(event.generation_tokens_per_s, '.0f')} tok/s"
            f"{skipped}"
        )
    if isinstance(event, m.Init):
        return (
            f"model {event.model} | {event.dataset_size} prompts | {event.steps_per_epoch} steps/epoch"
            f" | {event.total_steps} steps | output {event.output_dir}"
        )
    if isinstance(event, m.ResumeState):
        return f"resumed at step {event.step} (epoch {event.epoch + 1}/{event.total_epochs})"
    if isinstance(event, m.Eval):
        rewards = " ".join(f"{k} {_fmt(v, '.3f')}" for k, v in event.rewards.items())
        k = f" | pass@{event.num_samples} {_fmt(event.pass_at_k, '.3f')}" if event.num_samples > 1 else ""
        how = "greedy" if event.greedy else f"sampled x{event.num_samples}"
        return (
            f"eval at step {event.step} | {event.num_prompts} prompts, {how} | accuracy {_fmt(event.accuracy, '.3f')}"
            f"{k} | reward {_fmt(event.reward, '.3f')} | {rewards} | {event.seconds:.2f} s"
        )
    if isinstance(event, m.Checkpoint):
        return f"checkpoint ({event.kind}) step {event.step}: {event.path}"
    if isinstance(event, m.EpochEnd):
        return (
            f"epoch {event.epoch + 1} done | mean loss {_fmt(event.mean_loss)}"
            f" | mean reward {_fmt(event.mean_reward, '.3f')} | {event.seconds:.1f} s"
        )
    if isinstance(event, m.Log) and event.level != "debug":
        return f"[{event.level}] {event.message}"
    if isinstance(event, m.Error):
        if event.exit_code == Exit.MISTAKE:  # the user's to fix: the sentence says what to do
            return f"[mistake] {event.message}"
        if event.exit_code == Exit.UNREWARDED:
            return f"[stopped] {event.message}"
        if event.exit_code == Exit.CRASH:
            log = f" (the traceback is also in {event.log_path})" if event.log_path else ""
            return f"[crash] {event.message}{log}"
        return f"[{'fatal' if event.fatal else 'error'}] {event.message}"
    if isinstance(event, (m.Paused, m.Resumed)):
        return f"{event.__class__.__name__.lower()} at step {event.step}"
    if isinstance(event, m.Complete):
        if event.trained == 0 and event.status == "completed":
            return (f"completed already: the run had trained its {event.total_steps} steps, nothing was trained now "
                    "(raise training.max_steps to train on, or set checkpoint.resume = false to start again)")
        return f"{event.status}: {event.total_steps} steps in {event.seconds:.1f} s"
    if isinstance(event, m.Finding):
        if event.cleared:
            return f"[doctor] cleared at step {event.step}: {event.message}"
        fix = f" | suggested live change: {event.suggestion}" if event.suggestion else ""
        return f"[doctor {event.severity}] step {event.step}: {event.name}: {event.message}{fix}"
    if isinstance(event, m.SettingRefused):  # a SET line on stdin (or any asker): why nothing changed
        return f"[refused] {event.key}={event.value[:80]}: {event.message}"
    if isinstance(event, m.DatabasePath):
        return f"store {event.path} (run {event.run_id})"
    return None


def _last_byte(path: Path) -> bytes:
    with open(path, "rb") as f:
        f.seek(-1, os.SEEK_END)
        return f.read(1)


class Emitter:
    """Sends every event to the frame fd (as a frame or a plain line) and to ``run.jsonl``.

    Called from the event loop thread only. A reader that went away (broken pipe) does not stop
    training: frames are dropped, ``run.jsonl`` and the store keep everything.
    """

    def __init__(self, fd: int, plain: bool = False) -> None:
        self._fd: int | None = fd
        self.plain = plain
        self.total_steps = 0
        self.plain_every = 1  # logging.steps: a plain step line every N steps (and the last), as the trackers
        self._jsonl: BinaryIO | None = None
        self.jsonl_path: Path | None = None  # the run's log (run.jsonl), once the output folder is known
        self._pending: list[bytes] = []  # events sent before run.jsonl's folder is known
        self._mirror_failed = False

    def open_jsonl(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._jsonl = open_append(path)  # never through a planted link (common/run_folder.py)
        self.jsonl_path = path
        if self._jsonl.tell() and _last_byte(path) != b"\n":  # a kill cut the last line short
            self._jsonl.write(b"\n")
        for data in self._pending:
            self._jsonl.write(data)
        self._pending.clear()

    def emit(self, event: m.Event, mirror: m.Event | None = None) -> None:
        """The reader first: on a full disk the run.jsonl mirror fails, and the Error that says so
        must still reach the dashboard. ``mirror``: what run.jsonl keeps instead (a mistake's
        traceback, which the reader never sees)."""
        data = encode(event)
        if self.plain:
            line = None if self._thinned(event) else format_plain(event, self.total_steps)
            if line is not None:
                self._write(line.encode("utf-8", errors="replace") + b"\n")
            if isinstance(event, m.Error) and event.traceback:  # a crash's, for the person reading the CI log
                sys.stderr.write(event.traceback)
                sys.stderr.flush()
        else:
            self._write(data)
        self._mirror(encode(mirror) if mirror is not None else data)

    def _thinned(self, event: m.Event) -> bool:
        return isinstance(event, m.Step) and event.step % self.plain_every != 0 and event.step != self.total_steps

    def _mirror(self, data: bytes) -> None:
        if self._jsonl is None:
            self._pending.append(data)
            return
        try:
            self._jsonl.write(data)
        except OSError as exc:  # e.g. a full disk: keep going (the dashboard has the events), say it once
            if not self._mirror_failed:
                self._mirror_failed = True
                sys.stderr.write(f"run.jsonl: {exc}; events may be missing from it\n")
                sys.stderr.flush()

    def log(self, level: m.LogLevel, message: str) -> None:
        self.emit(m.Log(level=level, message=message, time=time.time()))

    def _write(self, data: bytes) -> None:
        if self._fd is None:
            return
        view = memoryview(data)
        try:
            while view:
                view = view[os.write(self._fd, view) :]
        except OSError:  # the reader is gone; keep training, the store and run.jsonl have it all
            self._fd = None

    def close(self) -> None:
        if self._jsonl is not None:
            self._jsonl.close()
            self._jsonl = None
        if self._fd is not None:
            try:
                os.close(self._fd)
            except OSError:
                pass
            self._fd = None
