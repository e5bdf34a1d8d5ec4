"""The worker child process: spawn it in its own process group, read frames, send commands.

Reading happens in two asyncio tasks (stdout frames, stderr lines) that post typed Textual
messages (``WorkerEvent``, ``WorkerStderr``, ``WorkerBadLine``, ``WorkerExited``) to the app; the
app buffers them and flushes them to widgets on a timer (docs/architecture.md, "Processes" and
"Dashboard"). ``kill`` signals the whole process group, so nothing the worker started outlives
the dashboard.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from textual.message import Message

from grpo_tui.protocol import codec
from grpo_tui.protocol import messages as m

RESUME_LATEST = ("--resume", "latest")  # the worker argument a restart adds: continue from the newest checkpoint


@dataclass(eq=False)
class WorkerEvent(Message):
    """One protocol frame from the worker."""

    event: m.Event


@dataclass(eq=False)
class WorkerStderr(Message):
    """One line the worker wrote to stderr."""

    line: str


@dataclass(eq=False)
class WorkerBadLine(Message):
    """A stdout line that is not a protocol frame (already described for the log)."""

    text: str


@dataclass(eq=False)
class WorkerExited(Message):
    """The worker is gone, after its last frame and stderr line."""

    code: int


WorkerOutput = WorkerEvent | WorkerStderr | WorkerBadLine | WorkerExited


class WorkerProcess:
    def __init__(
        self, argv: Sequence[str], *, post: Callable[[WorkerOutput], object], env: dict[str, str] | None = None
    ) -> None:
        """``post`` receives everything the worker says, in order (the app's ``post_message``)."""
        self.argv = list(argv)
        self.env = env or {}
        self._post = post
        self.proc: asyncio.subprocess.Process | None = None
        self._tasks: list[asyncio.Task[None]] = []

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.returncode is None

    async def start(self) -> None:
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **self.env}
        self.proc = await asyncio.create_subprocess_exec(
            *self.argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=env,
            start_new_session=True,  # its own process group: one killpg reaches its children too
            limit=codec.MAX_LINE_BYTES,
        )
        self._tasks = [asyncio.create_task(self._watch())]

    async def _read_frames(self) -> None:
        assert self.proc and self.proc.stdout
        while line := await _readline(self.proc.stdout):
            if not line.strip():
                continue
            try:
                self._post(WorkerEvent(codec.decode_event(line)))
            except codec.ProtocolError as exc:
                self._post(WorkerBadLine(f"bad frame ({exc.reason.split(' (')[0]}): {exc.line}"))

    async def _read_stderr(self) -> None:
        assert self.proc and self.proc.stderr
        while line := await _readline(self.proc.stderr):
            if line.strip():
                self._post(WorkerStderr(codec.truncate(line.decode("utf-8", errors="replace").rstrip("\r\n"), 4000)))

    async def _watch(self) -> None:
        """Read both pipes to the end, then report the exit code (after the last frame)."""
        assert self.proc
        readers = asyncio.ensure_future(
            asyncio.gather(self._read_frames(), self._read_stderr(), return_exceptions=True)
        )
        # Watch the exit too: a subprocess the worker started (a reward's) can hold the pipes open
        # after the worker is gone, and then EOF (and, before Python 3.12, wait()) never comes.
        while not readers.done() and self.proc.returncode is None:
            await asyncio.wait([readers], timeout=0.25)
        if self.proc.returncode is not None:
            self._end_group()
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.shield(readers), 5.0)
        code = await self.proc.wait()
        self._end_group()  # nothing the worker started outlives it
        if self.proc.stdin:  # lets asyncio close the transport now, not at garbage collection
            self.proc.stdin.close()
        self._post(WorkerExited(code))

    async def send(self, command: m.Command) -> bool:
        """Write one command; False when the worker is gone."""
        if not self.running or not self.proc or not self.proc.stdin:
            return False
        try:
            self.proc.stdin.write(codec.encode(command))
            await self.proc.stdin.drain()
            return True
        except (BrokenPipeError, ConnectionResetError, RuntimeError):
            return False

    async def wait(self, timeout: float) -> bool:
        """Wait for the process to exit; False on timeout."""
        if not self.proc:
            return True
        try:
            await asyncio.wait_for(asyncio.shield(self.proc.wait()), timeout)
            return True
        except asyncio.TimeoutError:
            return False

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Signal the whole process group (no-op when already gone)."""
        if self.proc and self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, sig)

    def _end_group(self) -> None:
        """SIGKILL what is left of the worker's process group once the worker itself has exited."""
        if self.proc:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)

    async def shutdown(self, timeout: float = 3.0) -> None:
        """Close stdin (the worker saves and exits on EOF), then TERM, then KILL the group."""
        if not self.proc or self.proc.returncode is not None:
            return
        if self.proc.stdin:
            with contextlib.suppress(Exception):
                self.proc.stdin.close()
        if await self.wait(timeout):
            return
        self.kill(signal.SIGTERM)
        if not await self.wait(2.0):
            self.kill(signal.SIGKILL)
            await self.wait(2.0)


async def _readline(stream: asyncio.StreamReader) -> bytes:
    """One line (b"" at EOF). A line over the limit is dropped by asyncio; it comes back as a line
    that says so (it fails to decode and is reported), instead of ending the read."""
    try:
        return await stream.readline()
    except ValueError:  # LimitOverrunError: asyncio drops the line; say so instead of going silent
        return f"(a line over the {codec.MAX_LINE_BYTES // 2**20} MiB line limit was dropped)\n".encode()
