"""A dashboard's link to a run: start its supervisor, connect to the control socket, catch up.

``launch`` starts ``python -m grpo_tui.tui.supervisor`` in its own session (so a closed terminal
never reaches it) and waits until its socket answers. ``RunConnection`` connects to the socket
(protocol/control.py), reads what the run said before it connected from ``run.jsonl`` (one
``WorkerHistory`` message), then posts each live frame. When the supervisor cuts it off (its queue
overflowed) it reconnects and catches up from ``run.jsonl`` again; frames are counted, so none is
shown twice or skipped (docs/architecture.md, "Processes"; docs/long-runs.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import msgspec

from grpo_tui.protocol import codec
from grpo_tui.protocol import control as c
from grpo_tui.protocol import messages as m
from grpo_tui.protocol.config import DisplayConfig
from grpo_tui.protocol.layout import RUN_LOG_FILE
from grpo_tui.tui.series import HISTORY_LIMIT
from grpo_tui.tui.supervisor_worker import kill_group
from grpo_tui.tui.worker_proc import (
    WorkerBadLine,
    WorkerEvent,
    WorkerExited,
    WorkerFrames,
    WorkerHistory,
    WorkerOutput,
    WorkerStderr,
)

LAUNCHED: list[int] = []  # supervisors this process started (tests end them)


class RunLive(Exception):
    """Another supervisor already runs in this folder."""


def launch_argv(
    output_dir: str | Path, worker_argv: Sequence[str], *, config_path: str = "",
    display: DisplayConfig | None = None, env: dict[str, str] | None = None, wait_viewer: float = 0.0,
) -> list[str]:
    d = display or DisplayConfig()
    return [
        sys.executable, "-m", "grpo_tui.tui.supervisor", "--output-dir", str(output_dir),
        "--config", str(Path(config_path).resolve()) if config_path else "",
        "--restart-delay", str(d.restart_delay_s), "--max-restarts", str(d.max_restarts),
        *([] if d.restart_on_crash else ["--no-restart"]), "--wait-viewer", str(wait_viewer),
        "--env-json", json.dumps(env or {}), "--", *worker_argv,
    ]


def launch(output_dir: str | Path, worker_argv: Sequence[str], **options: object) -> subprocess.Popen[bytes]:
    """Start the supervisor in its own session, its output to ``.control/supervisor.log``.
    Raises ``RunLive`` when a run already goes on in the folder."""
    out = Path(output_dir).resolve()
    folder = c.make_private_dir(c.control_dir(out))
    record = c.read_record(out)
    if c.is_live(record) and record is not None:
        raise RunLive(f"a run is already going in {out} (pid {record.pid}): `grpo-tui attach {shlex.quote(str(out))}`")
    env = options.pop("env", None) or {}
    # only what differs from ours goes on the command line (which other users can read; the rest is inherited)
    extra = {k: v for k, v in env.items() if os.environ.get(k) != v}  # type: ignore[attr-defined]
    with open(folder / c.SUPERVISOR_LOG, "ab") as log:
        proc = subprocess.Popen(
            launch_argv(out, worker_argv, env=extra, **options),  # type: ignore[arg-type]
            stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
        )
    LAUNCHED.append(proc.pid)
    return proc


def end_launched(timeout: float = 10.0) -> None:
    """Stop the runs this process started (scripts and benches whose runs must not outlive them):
    SIGTERM each supervisor's group (its worker saves and exits), and wait for them."""
    for pid in LAUNCHED:
        kill_group(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while any(c.pid_alive(pid) for pid in LAUNCHED) and time.monotonic() < deadline:
        time.sleep(0.05)
    LAUNCHED.clear()


def ready(output_dir: str | Path, proc: subprocess.Popen[bytes]) -> bool | None:
    """True once the socket exists, False when the supervisor exited, None while it starts."""
    if proc.poll() is not None:
        return False
    record = c.read_record(output_dir)
    return True if record is not None and record.pid == proc.pid and c.socket_path(output_dir).exists() else None


def wait_ready(output_dir: str | Path, proc: subprocess.Popen[bytes], timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while (state := ready(output_dir, proc)) is None and time.monotonic() < deadline:
        time.sleep(0.02)
    return bool(state)


async def wait_ready_async(output_dir: str | Path, proc: subprocess.Popen[bytes], timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while (state := ready(output_dir, proc)) is None and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    return bool(state)


def supervisor_failure(output_dir: str | Path) -> str:
    """The last lines of a supervisor that did not start."""
    try:
        text = (c.control_dir(output_dir) / c.SUPERVISOR_LOG).read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.strip().splitlines()[-5:])


def to_output(line: bytes) -> WorkerOutput | None:
    """One socket or run.jsonl line as a dashboard message (None for the supervisor's own welcome)."""
    try:
        frame = c.decode_frame(line)
    except (msgspec.DecodeError, msgspec.ValidationError):
        try:
            return WorkerEvent(codec.decode_event(line))
        except codec.ProtocolError as exc:
            return WorkerBadLine(f"bad frame ({exc.reason.split(' (')[0]}): {exc.line}")
    match frame:
        case c.Welcome() | c.WorkerStarted():
            return None
        case c.StderrLine(line=text):
            return WorkerStderr(text)
        case c.WorkerExit():
            return WorkerExited(frame)
        case _:
            return WorkerEvent(frame)


class RunConnection:
    """One viewer of one run. ``post`` receives every message in order (the app's ``post_message``).

    Nothing is shown twice and nothing is skipped, by counting: the welcome says how many worker
    frames were sent before it (they are the first lines of ``run.jsonl`` from the run's offset) and
    how many stderr lines; every frame after it arrives live."""

    def __init__(self, output_dir: str | Path, post: Callable[[WorkerFrames | WorkerHistory], object]) -> None:
        self.output_dir = Path(output_dir)
        self._post = post
        self.supervisor_pid = 0
        self.worker_pid = 0
        self.connected = False
        self.ended = False  # the run is over (its final worker_exit, or the supervisor is gone)
        self.exit_code: int | None = None  # the worker's, once the run is over
        self.closing = False
        self.reconnects = 0
        self._writer: asyncio.StreamWriter | None = None
        self._reader: asyncio.StreamReader | None = None
        self._task: asyncio.Task[None] | None = None
        self.frames_seen = 0  # worker frames shown (history and live)
        self._stderr_seen = 0
        self._tail_left = 0  # stderr lines still to come from the welcome's tail
        self._tail_index = 0
        self._log = JsonlCursor(self.output_dir)

    @property
    def pid(self) -> int:
        """The worker's pid (0 while none runs)."""
        return self.worker_pid

    @property
    def running(self) -> bool:
        return self.connected and not self.ended

    # ------------------------------------------------------------ connecting and catching up

    async def start(self) -> None:
        """Connect and post the history; raises OSError when no supervisor answers."""
        await self._connect()
        self._task = asyncio.create_task(self._follow())

    async def _connect(self) -> None:
        with c.socket_address(c.socket_path(self.output_dir)) as address:
            reader, writer = await asyncio.open_unix_connection(address, limit=codec.MAX_LINE_BYTES)
        first = await asyncio.wait_for(reader.readline(), 10.0)
        try:
            welcome = c.decode_frame(first)
        except (msgspec.DecodeError, msgspec.ValidationError):
            welcome = None
        if not isinstance(welcome, c.Welcome):
            writer.close()
            raise ConnectionError(f"{self.output_dir}: the control socket did not say welcome")
        self._reader, self._writer = reader, writer
        self.supervisor_pid, self.worker_pid = welcome.supervisor_pid, welcome.worker_pid
        self.connected = True
        self._tail_left, self._tail_index = welcome.stderr_tail, welcome.stderr_lines - welcome.stderr_tail
        # registered: every frame from number `welcome.frames` on reaches us live; the ones before are in run.jsonl
        self._log.start_at(welcome.jsonl_offset)
        items = await asyncio.to_thread(self._log.read, self.frames_seen, welcome.frames)
        self.frames_seen = max(self.frames_seen, welcome.frames)
        if items:
            self._post(WorkerHistory(items))

    # ------------------------------------------------------------ following

    def _counted(self, out: WorkerOutput | None) -> bool:
        """Count a live line; False for a stderr line of the welcome's tail that was already shown."""
        if isinstance(out, WorkerEvent):
            self.frames_seen += 1
        elif isinstance(out, WorkerStderr):
            if self._tail_left:
                self._tail_left -= 1
                index, self._tail_index = self._tail_index, self._tail_index + 1
                if index < self._stderr_seen:
                    return False
            self._stderr_seen += 1
        return out is not None

    async def _follow(self) -> None:
        while True:
            assert self._reader is not None
            lines = LineSplitter(self._reader)
            try:
                while (chunk := await lines.read()) is not None:
                    batch = [out for line in chunk if (out := self._live(line)) is not None]
                    if batch:
                        self._post(WorkerFrames(batch))
            except (ConnectionError, OSError):
                pass
            self.connected = False
            if self.closing or self.ended:
                return
            # Cut off (we fell behind) or the supervisor is gone: reconnect and catch up, or say it ended.
            if c.pid_alive(self.supervisor_pid):
                try:
                    await asyncio.sleep(0.2)
                    await self._connect()
                    self.reconnects += 1
                    continue
                except (OSError, ConnectionError, asyncio.TimeoutError):
                    pass
            self.ended = True
            record = c.read_record(self.output_dir)
            if record is not None and record.exit_code is not None and record.status not in c.LIVE_STATUSES:
                self._post(WorkerFrames([WorkerExited(c.WorkerExit(code=record.exit_code, reason=record.reason, final=True))]))
            else:
                gone = f"the run's supervisor (pid {self.supervisor_pid}) is gone"
                self._post(WorkerFrames([WorkerExited(c.WorkerExit(code=-9, reason=gone, final=True))]))
            return

    def _live(self, line: bytes) -> WorkerOutput | None:
        """One live line as a message for the app (None: nothing to show)."""
        if not line.strip():
            return None
        if line.startswith(b'{"type":"worker_started"'):
            self.worker_pid = _started_pid(line)
            return None
        out = to_output(line)
        if not self._counted(out):
            return None
        if isinstance(out, WorkerExited):
            self.ended = out.exit.final
            self.exit_code = out.exit.code if out.exit.final else None
            if not out.exit.final:
                self.worker_pid = 0
        elif isinstance(out, WorkerEvent) and isinstance(out.event, m.Hello):
            self.worker_pid = out.event.pid
        return out

    async def send(self, command: m.Command | c.Restart) -> bool:
        """Write one command; False when the run cannot take it."""
        if not self.connected or self._writer is None:
            return False
        try:
            self._writer.write(c.encode(command))
            await self._writer.drain()
            return True
        except (ConnectionError, OSError, RuntimeError):
            return False

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Signal the worker's process group (``q`` twice: kill now)."""
        if self.worker_pid:
            kill_group(self.worker_pid, sig)

    async def wait(self, timeout: float) -> bool:
        """Wait for the run to end; False on timeout."""
        deadline = time.monotonic() + timeout
        while not self.ended and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        return self.ended

    async def close(self) -> None:
        """Detach: the run goes on."""
        self.closing = True
        if self._writer is not None:
            with contextlib.suppress(Exception):
                self._writer.close()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task


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


_SAMPLE, _STATUS, _STEP = b'{"type":"sample"', b'{"type":"status"', b'{"type":"step"'


def decode_lines(lines: list[bytes]) -> list[WorkerOutput]:
    """run.jsonl lines as messages, for a dashboard to fold. A long run's history is mostly samples
    and phase changes; only what the screen can show is decoded: the newest step's samples, the
    newest phase (and phases that carry a message, for the log), every other frame, and of the steps
    that would leave the charts (``HISTORY_LIMIT`` newer ones follow) only their counters."""
    if not lines:
        return []
    # what to keep, by index: every frame but samples and phases (list comprehensions: C-speed loops)
    kept = [i for i, line in enumerate(lines) if not (line.startswith(_SAMPLE) or line.startswith(_STATUS))]
    kept += [i for i, line in enumerate(lines) if line.startswith(_STATUS) and b'"message":""' not in line]
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
            with contextlib.suppress(msgspec.DecodeError, msgspec.ValidationError):
                n = _counters.decode(line)
                out.append(WorkerEvent(m.Step(step=n.step, epoch=n.epoch, num_tokens=n.num_tokens, generation_ms=n.generation_ms,
                                              scoring_ms=n.scoring_ms, training_ms=n.training_ms)))
                continue
        if not line.strip():
            continue
        try:  # run.jsonl holds the worker's frames only
            out.append(WorkerEvent(codec.decode_event(line)))
        except codec.ProtocolError as exc:
            out.append(WorkerBadLine(f"bad frame ({exc.reason.split(' (')[0]}): {exc.line}"))
    return out


def _last_index(lines: list[bytes], prefix: bytes) -> int:
    return next((i for i in range(len(lines) - 1, -1, -1) if lines[i].startswith(prefix)), -1)


def _started_pid(line: bytes) -> int:
    with contextlib.suppress(msgspec.DecodeError, msgspec.ValidationError):
        frame = c.decode_frame(line)
        if isinstance(frame, c.WorkerStarted):
            return frame.pid
    return 0


class _StepCounters(msgspec.Struct):
    """What ``RunState.count_step`` reads of a step (msgspec skips the rest of the line unparsed)."""

    step: int
    epoch: int
    num_tokens: int = 0
    generation_ms: float | None = None
    scoring_ms: float | None = None
    training_ms: float | None = None


_counters = msgspec.json.Decoder(_StepCounters)


class _StepOnly(msgspec.Struct):
    step: int = -1


_step_decoder = msgspec.json.Decoder(_StepOnly)


def _step_of(line: bytes) -> int:
    with contextlib.suppress(msgspec.DecodeError, msgspec.ValidationError):
        return _step_decoder.decode(line).step
    return -1


class LineSplitter:
    """The complete lines a stream has now, as they come: one wake-up for a burst of frames, not one
    per frame. A line over ``codec.MAX_LINE_BYTES`` is dropped and said so (asyncio's limit)."""

    def __init__(self, stream: asyncio.StreamReader, limit: int = codec.MAX_LINE_BYTES) -> None:
        self.stream, self.limit = stream, limit
        self._partial = bytearray()
        self._dropping = False  # inside a line over the limit: skip to its end

    async def read(self) -> list[bytes] | None:
        """The next lines (at least one, or a dropped line's note); None at the end of the stream."""
        while True:
            data = await self.stream.read(1 << 18)
            if not data:
                return None
            self._partial += data
            end = self._partial.rfind(b"\n")
            if end < 0:
                if len(self._partial) > self.limit and not self._dropping:
                    self._partial.clear()
                    self._dropping = True
                    return [self._dropped()]
                if self._dropping:
                    self._partial.clear()
                continue
            lines = bytes(self._partial[:end]).split(b"\n")
            del self._partial[:end + 1]
            if self._dropping:  # the rest of the long line
                lines, self._dropping = lines[1:], False
            return lines

    def _dropped(self) -> bytes:
        return f"(a line over the {self.limit // 2**20} MiB line limit was dropped)".encode()
