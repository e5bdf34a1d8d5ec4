"""The supervisor's worker process: started in its own process group, fed commands on stdin, its
stdout and stderr read as fast as they come, and nothing it started left behind when it ends.

Each stdout line goes to ``on_line`` (the supervisor: its frames, byte for byte); each stderr line
is appended to ``.control/worker.stderr`` and its text goes to ``on_stderr``. Like the supervisor,
it imports no Textual and no MLX.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections import deque
from collections.abc import Callable
from pathlib import Path

from grpo_tui.common.last_frame import TAIL_LINES
from grpo_tui.common.run_folder import open_append
from grpo_tui.protocol import codec
from grpo_tui.protocol import messages as m

RESUME_LATEST = ("--resume", "latest")


class WorkerProcess:
    """One worker at a time (``start``, then ``wait``); a restart starts the next one."""

    def __init__(self, argv: list[str], env: dict[str, str], stderr_path: Path,
                 on_line: Callable[[bytes], None], on_stderr: Callable[[str], None]) -> None:
        self.argv, self.env = argv, env
        self.on_line, self.on_stderr = on_line, on_stderr
        self.stderr_file = open_append(stderr_path)  # open while the supervisor runs; never through a link
        self.proc: asyncio.subprocess.Process | None = None
        self.last_stderr = ""  # the worker's last stderr line: why it ended, when nothing else says
        self._tail: deque[str] = deque(maxlen=TAIL_LINES)

    @property
    def pid(self) -> int:
        """The running worker's pid; 0 when none runs."""
        return self.proc.pid if self.proc and self.proc.returncode is None else 0

    async def start(self, resume_latest: bool) -> int:
        """Start a worker (with ``--resume latest`` after a crash): its pid, or 0, with ``last_stderr``
        saying why, if it cannot be started."""
        argv = self.argv + (list(RESUME_LATEST) if resume_latest else [])
        self.last_stderr = ""
        self._tail.clear()
        try:
            self.proc = await asyncio.create_subprocess_exec(
                *argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE, env=self.env, start_new_session=True,
                limit=codec.MAX_LINE_BYTES,
            )
        except OSError as exc:
            self.last_stderr = f"cannot start the worker ({' '.join(argv[:3])}…): {exc}"
            return 0
        return self.proc.pid

    async def wait(self) -> int:
        """Read the started worker's output until it exits; its exit code."""
        proc = self.proc
        assert proc and proc.stdout and proc.stderr
        readers = asyncio.ensure_future(asyncio.gather(
            self._read_stdout(proc.stdout), self._read_stderr(proc.stderr), return_exceptions=True
        ))
        # A process the worker started can hold the pipes open after it is gone: watch the exit too.
        while not readers.done() and proc.returncode is None:
            await asyncio.wait([readers], timeout=0.25)
        if proc.returncode is not None:
            kill_group(proc.pid)
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.shield(readers), 5.0)
        code = await proc.wait()
        kill_group(proc.pid)  # nothing the worker started outlives it
        if proc.stdin:
            proc.stdin.close()
        return code

    def tail(self) -> list[str]:
        """The current worker's last few stderr lines."""
        return list(self._tail)

    async def send(self, cmd: m.Command) -> None:
        """A command to the running worker's stdin (none runs: dropped)."""
        proc = self.proc
        if proc is None or proc.returncode is not None or proc.stdin is None:
            return
        with contextlib.suppress(ConnectionError, RuntimeError, OSError):
            proc.stdin.write(codec.encode(cmd))
            await proc.stdin.drain()

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Signal the worker's process group (the worker and whatever it started)."""
        if self.proc:
            kill_group(self.proc.pid, sig)

    def enforce_stop(self, timeout_s: float) -> None:
        """A worker that has not stopped ``timeout_s`` after it was asked (whoever asked, and whether or
        not a viewer is still there): SIGTERM (it saves an emergency checkpoint), then SIGKILL."""
        if self.proc is not None:
            asyncio.get_running_loop().call_later(timeout_s, _enforce_stop, self.proc)

    async def _read_stdout(self, stream: asyncio.StreamReader) -> None:
        while line := await _readline(stream):
            if line.strip():
                self.on_line(line)

    async def _read_stderr(self, stream: asyncio.StreamReader) -> None:
        while line := await _readline(stream):
            with contextlib.suppress(OSError):
                self.stderr_file.write(line if line.endswith(b"\n") else line + b"\n")
            text = line.decode("utf-8", errors="replace").rstrip("\r\n")
            if text.strip():
                self.last_stderr = text
                self._tail.append(text)
                self.on_stderr(text)


def kill_group(pid: int, sig: int = signal.SIGKILL) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


def _enforce_stop(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is None:
        kill_group(proc.pid, signal.SIGTERM)
        asyncio.get_running_loop().call_later(10.0, kill_group, proc.pid)  # a no-op once it is gone


async def _readline(stream: asyncio.StreamReader) -> bytes:
    try:
        return await stream.readline()
    except ValueError:  # a line over the limit: asyncio drops it; say so instead of going silent
        return f"(a line over the {codec.MAX_LINE_BYTES // 2**20} MiB line limit was dropped)\n".encode()
