"""The supervisor's side of the control socket: every connected viewer, and what a new one is owed.

A viewer is welcomed (``Welcome``: where to catch up in ``run.jsonl``), then gets the tail of the
worker's stderr and, if one is on screen, the crash countdown, the retry offer or the final exit
(``WorkerExit``). From then on every frame goes to its bounded queue; a viewer that does not keep up
is cut off and reconnects. The lines a viewer sends are handed to the supervisor as they come.

Like the supervisor, it imports no Textual and no MLX.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections import deque
from collections.abc import Awaitable, Callable

from grpo_tui.protocol import codec
from grpo_tui.protocol import messages as m

STDERR_KEPT = 200  # stderr lines a new viewer gets (the rest is in worker.stderr)
# A viewer's queue: frames waiting for a slow reader. Past this it is cut off (it catches up from run.jsonl).
# Twice the longest frame, so one long completion alone never cuts a viewer off.
QUEUE_BYTES = int(os.environ.get("GRPO_TUI_VIEWER_QUEUE_KB", str(2 * codec.MAX_LINE_BYTES // 1024))) * 1024
QUEUE_FRAMES = 20_000
BATCH_S = 0.05  # a viewer gets the frames of this long in one write


class Viewer:
    """One connected dashboard: a bounded queue drained by its own task."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self.writer = writer
        self.queue: deque[bytes] = deque()
        self.queued_bytes = 0
        self.wake = asyncio.Event()
        self.closed = False

    def offer(self, data: bytes) -> None:
        """Never blocks: a viewer whose queue is full is cut off instead."""
        if self.closed:
            return
        if self.queue and (self.queued_bytes + len(data) > QUEUE_BYTES or len(self.queue) >= QUEUE_FRAMES):
            self.close()
            return
        self.queue.append(data)
        self.queued_bytes += len(data)
        self.wake.set()

    async def pump(self) -> None:
        """What waits goes out in one write, then the frames of the next ``BATCH_S`` gather: a fast
        run costs each viewer (and this process) a few wake-ups a second, not one per frame."""
        try:
            while not self.closed:
                await self.wake.wait()
                self.wake.clear()
                if self.queue and not self.closed:
                    data = b"".join(self.queue)
                    self.queue.clear()
                    self.queued_bytes = 0
                    self.writer.write(data)
                    await self.writer.drain()
                    await asyncio.sleep(BATCH_S)
        except (ConnectionError, OSError):
            pass
        finally:
            self.close()

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.queue.clear()
            self.wake.set()
            self.writer.transport.abort()  # drop what the kernel has not taken: the reader catches up from run.jsonl


class ViewerHub:
    """The viewers of one run. ``serve`` is the control socket's connection handler.

    ``welcome`` gives the run's side of a new viewer's ``Welcome`` (the hub adds the stderr counts it
    keeps), ``on_command`` gets each line a viewer sends, ``on_count`` the number of viewers whenever
    it changes."""

    def __init__(self, welcome: Callable[[], m.Welcome], on_command: Callable[[bytes], Awaitable[None]],
                 on_count: Callable[[int], None]) -> None:
        self.welcome, self.on_command, self.on_count = welcome, on_command, on_count
        self.viewers: set[Viewer] = set()
        self.first_viewer = asyncio.Event()
        self.stderr_tail: deque[bytes] = deque(maxlen=STDERR_KEPT)
        self.stderr_lines = 0
        self.pending_exit: m.WorkerExit | None = None  # the countdown or final exit a new viewer must see
        self.countdown_ends = 0.0

    def __len__(self) -> int:
        return len(self.viewers)

    def broadcast(self, data: bytes) -> None:
        for viewer in list(self.viewers):
            viewer.offer(data)
            if viewer.closed:
                self.viewers.discard(viewer)

    def stderr_line(self, text: str) -> None:
        """One (non-blank) line of the worker's stderr: to every viewer, and kept for the next ones."""
        self.stderr_lines += 1
        data = codec.encode(m.StderrLine(line=codec.truncate(text, 4000)))
        self.stderr_tail.append(data)
        self.broadcast(data)

    def show_exit(self, frame: m.WorkerExit) -> None:
        """The worker's exit, to every viewer and to each that connects until ``clear_exit``. A
        countdown (``restart_in_s``) is told to a later viewer as what is left of it."""
        self.pending_exit = frame
        if frame.restart_in_s is not None:
            self.countdown_ends = time.monotonic() + frame.restart_in_s
        self.broadcast(codec.encode(frame))

    def clear_exit(self) -> None:
        self.pending_exit = None

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        viewer = Viewer(writer)
        welcome = self.welcome()
        welcome.stderr_lines, welcome.stderr_tail = self.stderr_lines, len(self.stderr_tail)
        viewer.offer(codec.encode(welcome))
        for line in self.stderr_tail:
            viewer.offer(line)
        if self.pending_exit is not None:
            if self.pending_exit.restart_in_s is not None:
                self.pending_exit.restart_in_s = max(0.0, self.countdown_ends - time.monotonic())
            viewer.offer(codec.encode(self.pending_exit))
        self.viewers.add(viewer)
        self.first_viewer.set()
        self.on_count(len(self.viewers))
        pump = asyncio.create_task(viewer.pump())
        try:
            while not viewer.closed:
                line = await reader.readline()
                if not line:
                    break
                if line.strip():
                    await self.on_command(line)
        except (ConnectionError, OSError, ValueError):
            pass
        finally:
            viewer.close()
            self.viewers.discard(viewer)
            pump.cancel()
            self.on_count(len(self.viewers))

    async def drain(self, timeout_s: float) -> None:
        """Give the viewers up to ``timeout_s`` to take what is queued for them (the run's last frames)."""
        deadline = time.monotonic() + timeout_s
        while any(v.queue for v in self.viewers) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)

    def close(self) -> None:
        for viewer in list(self.viewers):
            viewer.close()
