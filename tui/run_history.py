"""What a run said before a viewer connected, read back from ``run.jsonl``: the frames a viewer
missed, by number (``JsonlCursor``), a finished run's frames (``read_history``), and of a long
history only what the screen can show (``decode_lines``; docs/architecture.md, "Processes").
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

import msgspec

from grpo_tui.protocol import codec
from grpo_tui.protocol import control as c
from grpo_tui.protocol import messages as m
from grpo_tui.protocol.layout import RUN_LOG_FILE
from grpo_tui.tui.run_messages import WorkerBadLine, WorkerEvent, WorkerOutput
from grpo_tui.tui.series import HISTORY_LIMIT


def bad_line(exc: codec.ProtocolError) -> WorkerBadLine:
    """A line that did not decode, as the log shows it."""
    return WorkerBadLine(f"bad frame ({exc.summary}): {exc.line}")


class JsonlCursor:
    """Reads ``run.jsonl`` by frame number: line ``n`` after the run's offset is its frame ``n``."""

    WAIT_S = 3.0  # the worker mirrors a frame right after sending it (at start, once it knows its folder)

    def __init__(self, output_dir: Path) -> None:
        self.path = output_dir / RUN_LOG_FILE
        self.offset: int | None = None  # byte position of line number `line`
        self.line = 0

    def start_at(self, offset: int) -> None:
        if self.offset is None:
            self.offset = offset

    def read(self, first: int, end: int) -> list[WorkerOutput]:
        """Frames ``first`` to ``end - 1`` as messages (fewer if run.jsonl lacks them after a wait)."""
        if end <= first:
            return []
        lines: list[bytes] = []
        deadline = time.monotonic() + self.WAIT_S
        while True:
            lines += self._next_lines(end - self.line)
            if self.line >= end or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        keep = lines[max(0, len(lines) - (self.line - first)):] if self.line > first else []
        return decode_lines(keep)

    def _next_lines(self, count: int) -> list[bytes]:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset or 0)
                data = f.read()
        except OSError:
            return []
        end = data.rfind(b"\n") + 1  # a line the worker is still writing is read next time
        if not end:
            return []
        if b"\n\n" in data[:end] or data.startswith(b"\n"):  # blank lines (a torn write's repair): not frames
            return self._next_lines_slowly(data, count)
        lines = data[:end - 1].split(b"\n", count)  # in C: a long run's history is tens of thousands of lines
        if len(lines) > count:
            end -= len(lines.pop()) + 1  # the lines after the ``count``-th are read later
        self.offset = (self.offset or 0) + end
        self.line += len(lines)
        return lines

    def _next_lines_slowly(self, data: bytes, count: int) -> list[bytes]:
        out: list[bytes] = []
        pos = 0
        while len(out) < count:
            nl = data.find(b"\n", pos)
            if nl < 0:
                break
            if data[pos:nl].strip():
                out.append(data[pos:nl])
            pos = nl + 1
        self.offset = (self.offset or 0) + pos
        self.line += len(out)
        return out


def read_history(output_dir: Path) -> list[WorkerOutput]:
    """A finished run's frames: ``run.jsonl`` from where its (last) supervisor began it."""
    record = c.read_record(output_dir)
    try:
        with open(output_dir / RUN_LOG_FILE, "rb") as f:
            f.seek(record.jsonl_offset if record is not None else 0)
            data = f.read()
    except OSError:
        return []
    return decode_lines([line for line in data.splitlines() if line.strip()])


_SAMPLE, _STATUS, _STEP = codec.line_prefix(m.Sample), codec.line_prefix(m.Status), codec.line_prefix(m.Step)
_NO_MESSAGE = codec.empty_text_marker("message")


def decode_lines(lines: list[bytes]) -> list[WorkerOutput]:
    """run.jsonl lines as messages, for a dashboard to fold. A long run's history is mostly samples
    and phase changes; only what the screen can show is decoded: the newest step's samples, the
    newest phase (and phases that carry a message, for the log), every other frame, and of the steps
    that would leave the charts (``HISTORY_LIMIT`` newer ones follow) only their counters."""
    if not lines:
        return []
    # what to keep, by index: every frame but samples and phases (list comprehensions: C-speed loops)
    kept = [i for i, line in enumerate(lines) if not (line.startswith(_SAMPLE) or line.startswith(_STATUS))]
    kept += [i for i, line in enumerate(lines) if line.startswith(_STATUS) and _NO_MESSAGE not in line]
    last_status = _last_index(lines, _STATUS)
    last_sample = _last_index(lines, _SAMPLE)
    extra = [last_status] if last_status >= 0 else []
    if last_sample >= 0:  # the newest step's samples (consecutive lines of one step)
        step, first = _step_of(lines[last_sample]), last_sample
        while first > 0 and lines[first - 1].startswith(_SAMPLE) and _step_of(lines[first - 1]) == step:
            first -= 1
        extra += range(first, last_sample + 1)
    order = sorted(set(kept).union(extra))
    steps = [i for i in order if lines[i].startswith(_STEP)]
    charted = steps[-HISTORY_LIMIT] if len(steps) > HISTORY_LIMIT else 0
    out: list[WorkerOutput] = []
    for i in order:
        line = lines[i]
        if i < charted and line.startswith(_STEP):  # off the charts: its counters are enough
            with contextlib.suppress(codec.ProtocolError):
                n = codec.decode_fields(line, _StepCounters)
                out.append(WorkerEvent(m.Step(step=n.step, epoch=n.epoch, num_tokens=n.num_tokens, generation_ms=n.generation_ms,
                                              scoring_ms=n.scoring_ms, training_ms=n.training_ms)))
                continue
        if not line.strip():
            continue
        try:  # run.jsonl holds the worker's frames only
            out.append(WorkerEvent(codec.decode_event(line)))
        except codec.ProtocolError as exc:
            out.append(bad_line(exc))
    return out


def _last_index(lines: list[bytes], prefix: bytes) -> int:
    return next((i for i in range(len(lines) - 1, -1, -1) if lines[i].startswith(prefix)), -1)


class _StepCounters(msgspec.Struct):
    """What ``RunState.apply`` reads of a step it does not chart (the rest of the line is skipped unparsed)."""

    step: int
    epoch: int
    num_tokens: int = 0
    generation_ms: float | None = None
    scoring_ms: float | None = None
    training_ms: float | None = None


class _StepOnly(msgspec.Struct):
    step: int = -1


def _step_of(line: bytes) -> int:
    with contextlib.suppress(codec.ProtocolError):
        return codec.decode_fields(line, _StepOnly).step
    return -1
