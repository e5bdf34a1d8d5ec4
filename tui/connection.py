"""A dashboard's view of a live run: connect to its control socket, catch up, follow.

``RunConnection`` connects to the socket (protocol/control.py), reads what the run said before it
connected from ``run.jsonl`` (one ``WorkerHistory`` message; tui/run_history.py), then posts each
live frame. When the supervisor cuts it off (its queue overflowed) it reconnects and catches up from
``run.jsonl`` again; frames are counted, so none is shown twice or skipped (docs/architecture.md,
"Processes"; docs/long-runs.md). Starting the supervisor is tui/launcher.py's.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections.abc import Callable
from pathlib import Path

from grpo_tui.protocol import codec
from grpo_tui.protocol import control as c
from grpo_tui.protocol import messages as m
from grpo_tui.tui.run_history import JsonlCursor, bad_line
from grpo_tui.tui.run_messages import (
    WorkerEvent,
    WorkerExited,
    WorkerFrames,
    WorkerHistory,
    WorkerOutput,
    WorkerStderr,
)
from grpo_tui.tui.supervisor_worker import kill_group


def to_output(frame: m.ViewerFrame) -> WorkerOutput | None:
    """One decoded socket line as a dashboard message (None for the supervisor's own bookkeeping)."""
    match frame:
        case m.Welcome() | m.WorkerStarted():
            return None
        case m.StderrLine(line=text):
            return WorkerStderr(text)
        case m.WorkerExit():
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
        self.worker_pid = 0  # 0 while none runs
        self.connected = False
        self.ended = False  # the run is over (its final worker_exit, or the supervisor is gone)
        self.closing = False
        self._writer: asyncio.StreamWriter | None = None
        self._reader: asyncio.StreamReader | None = None
        self._task: asyncio.Task[None] | None = None
        self.frames_seen = 0  # worker frames shown (history and live)
        self._stderr_seen = 0
        self._tail_left = 0  # stderr lines still to come from the welcome's tail
        self._tail_index = 0
        self._log = JsonlCursor(self.output_dir)

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
            welcome: m.ViewerFrame | None = codec.decode_viewer_frame(first)
        except codec.ProtocolError:
            welcome = None
        if not isinstance(welcome, m.Welcome):
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
                    continue
                except (OSError, ConnectionError, asyncio.TimeoutError):
                    pass
            self.ended = True
            record = c.read_record(self.output_dir)
            if record is not None and record.exit_code is not None and record.status not in c.LIVE_STATUSES:
                self._post(WorkerFrames([WorkerExited(m.WorkerExit(code=record.exit_code, reason=record.reason, final=True))]))
            else:
                gone = f"the run's supervisor (pid {self.supervisor_pid}) is gone"
                self._post(WorkerFrames([WorkerExited(m.WorkerExit(code=-9, reason=gone, final=True))]))
            return

    def _live(self, line: bytes) -> WorkerOutput | None:
        """One live line as a message for the app (None: nothing to show)."""
        if not line.strip():
            return None
        try:
            frame = codec.decode_viewer_frame(line)
        except codec.ProtocolError as exc:
            out: WorkerOutput | None = bad_line(exc)
        else:
            if isinstance(frame, m.WorkerStarted):
                self.worker_pid = frame.pid
                return None
            out = to_output(frame)
        if not self._counted(out):
            return None
        if isinstance(out, WorkerExited):
            self.ended = out.exit.final
            if not out.exit.final:
                self.worker_pid = 0
        elif isinstance(out, WorkerEvent) and isinstance(out.event, m.Hello):
            self.worker_pid = out.event.pid
        return out

    async def send(self, command: m.ViewerCommand) -> bool:
        """Write one command; False when the run cannot take it."""
        if not self.connected or self._writer is None:
            return False
        try:
            self._writer.write(codec.encode(command))
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
