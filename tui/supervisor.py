"""The run's supervisor: owns the worker, restarts it after a crash, serves it to any number of viewers.

    python -m grpo_tui.tui.supervisor --output-dir DIR [--restart-delay S] ... -- WORKER_ARGV...

It imports no Textual and no MLX (the protocol and the standard library only), so it is small and
outlives every dashboard: ``grpo-tui run`` and ``run --detach`` start it in its own session, where a
closed terminal (SIGHUP) never reaches it (docs/architecture.md, "Processes"; docs/long-runs.md).

- The worker's stdout frames are read as fast as they come and handed, byte for byte, to each
  viewer's bounded queue. A viewer that does not keep up is cut off when its queue overflows; it
  reconnects and catches up from ``run.jsonl``. Training never waits for a viewer.
- Viewers' commands go to the worker's stdin; ``restart`` answers a crash countdown. The run's
  sample display is the worker's (any viewer's ``m`` changes it for all); a restarted worker is told
  the mode the run had.
- After a crash (``protocol.outcome.restartable``) it counts down ``restart_delay_s`` and starts the
  worker again with ``--resume latest``, at most ``max_restarts`` times. A fixable mistake, a NaN
  stop or a user's stop is never restarted.
- ``supervisor.json`` (protocol/control.py) keeps the run's status for ``grpo-tui ls``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import sys
import time
from collections import deque
from pathlib import Path

import msgspec

from grpo_tui.protocol import codec
from grpo_tui.protocol import control as c
from grpo_tui.protocol import messages as m
from grpo_tui.protocol.layout import RUN_LOG_FILE
from grpo_tui.protocol.outcome import Exit, describe, restartable

RESUME_LATEST = ("--resume", "latest")
STDERR_KEPT = 200  # stderr lines a new viewer gets (the rest is in worker.stderr)
LINGER_S = 1.0  # after the run ends: time for viewers to read the last frames
RECORD_EVERY_S = 1.0  # supervisor.json is rewritten at most this often for steps
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


class Supervisor:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.out = Path(args.output_dir).resolve()
        self.worker_argv: list[str] = list(args.worker_argv)
        self.env = {**os.environ, "PYTHONUNBUFFERED": "1", **json.loads(args.env_json or "{}")}
        jsonl = self.out / RUN_LOG_FILE
        self.record = c.RunRecord(
            pid=os.getpid(), output_dir=str(self.out), config=args.config, overrides=set_items(self.worker_argv),
            started_at=time.time(),
            jsonl_offset=jsonl.stat().st_size if jsonl.exists() else 0,
        )
        self.viewers: set[Viewer] = set()
        self.first_viewer = asyncio.Event()
        self.proc: asyncio.subprocess.Process | None = None
        self.stderr_tail: deque[bytes] = deque(maxlen=STDERR_KEPT)
        self.stderr_file = open(c.control_dir(self.out) / c.STDERR_FILE, "ab", buffering=0)  # noqa: SIM115
        self.pending_exit: c.WorkerExit | None = None  # the countdown or final exit a new viewer must see
        self.countdown_ends = 0.0
        self.restart_answer: asyncio.Future[bool] | None = None
        self.stopping = False
        self.refused = ""
        self.completed: m.Complete | None = None
        self.last_error = ""
        self.last_stderr = ""
        self.greeted = False  # the current worker's first frame was checked
        self.saved = False  # a checkpoint of this run exists (a mistake's retry resumes from it)
        self.frames = 0  # the worker frames broadcast so far (all workers of this run)
        self.display: m.SampleDisplay | None = None  # the run's sample display, as its worker last said
        self._display_task: asyncio.Future[None] | None = None
        self.stderr_count = 0
        self._recorded_at = 0.0
        self._record_due = False

    # ------------------------------------------------------------ viewers

    def broadcast(self, data: bytes) -> None:
        for viewer in list(self.viewers):
            viewer.offer(data)
            if viewer.closed:
                self.viewers.discard(viewer)

    async def serve_viewer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        viewer = Viewer(writer)
        pid = self.proc.pid if self.proc and self.proc.returncode is None else 0
        viewer.offer(c.encode(c.Welcome(
            supervisor_pid=os.getpid(), worker_pid=pid, jsonl_offset=self.record.jsonl_offset, frames=self.frames,
            stderr_lines=self.stderr_count, stderr_tail=len(self.stderr_tail), restarts=self.record.restarts,
        )))
        for line in self.stderr_tail:
            viewer.offer(line)
        if self.pending_exit is not None:
            if self.pending_exit.restart_in_s is not None:
                self.pending_exit.restart_in_s = max(0.0, self.countdown_ends - time.monotonic())
            viewer.offer(c.encode(self.pending_exit))
        self.viewers.add(viewer)
        self.first_viewer.set()
        self._update_record(viewers=len(self.viewers))
        pump = asyncio.create_task(viewer.pump())
        try:
            while not viewer.closed:
                line = await reader.readline()
                if not line:
                    break
                if line.strip():
                    await self.command(line)
        except (ConnectionError, OSError, ValueError):
            pass
        finally:
            viewer.close()
            self.viewers.discard(viewer)
            pump.cancel()
            self._update_record(viewers=len(self.viewers))

    async def command(self, line: bytes) -> None:
        try:
            cmd = c.decode_command(line)
        except (msgspec.DecodeError, msgspec.ValidationError):
            return
        if isinstance(cmd, c.Restart):
            if self.restart_answer is not None and not self.restart_answer.done():
                self.restart_answer.set_result(cmd.now)
            return
        if isinstance(cmd, m.Stop):
            if not self.stopping and self.proc is not None:
                asyncio.get_running_loop().call_later(self.args.stop_timeout, _enforce_stop, self.proc)
            self.stopping = True
            self._update_record(status="stopping")
            if self.restart_answer is not None and not self.restart_answer.done():
                self.restart_answer.set_result(False)
        await self.to_worker(cmd)

    async def to_worker(self, cmd: m.Command) -> None:
        proc = self.proc
        if proc is None or proc.returncode is not None or proc.stdin is None:
            return
        with contextlib.suppress(ConnectionError, RuntimeError, OSError):
            proc.stdin.write(codec.encode(cmd))
            await proc.stdin.drain()

    # ------------------------------------------------------------ the worker

    def _update_record(self, **changes: object) -> None:
        for key, value in changes.items():
            setattr(self.record, key, value)
        with contextlib.suppress(OSError):
            c.write_record(self.record)
        self._recorded_at = time.monotonic()

    def _flush_record(self) -> None:
        self._record_due = False
        self._update_record()

    def on_frame(self, line: bytes) -> None:
        """Bookkeeping for supervisor.json and the restart decision; the line goes out unchanged."""
        try:
            event = codec.decode_event(line)
        except codec.ProtocolError:
            return
        self.frames += 1  # frames (not other lines) are what run.jsonl mirrors, one line each
        if not self.greeted:
            self.greeted = True
            if (why := c.refusal(event)) is not None:  # a foreign worker: it is not run, nor restarted
                self.refused = why
                if self.proc:
                    _kill_group(self.proc.pid)
                return
        match event:
            case m.Init():
                self._update_record(total_steps=event.total_steps)
                if self.display is None:
                    self.display = event.sample_display
                elif event.sample_display not in (None, self.display):
                    # a restarted worker starts with the config's mode: the run keeps the one a viewer chose
                    self._display_task = asyncio.ensure_future(self.to_worker(m.SetSampleDisplay(mode=self.display)))
            case m.SampleDisplayChanged():
                self.display = event.mode
            case m.ResumeState():
                self._update_record(step=event.step, status="running")
            case m.Step():
                self.record.step, self.record.last_reward = event.step, m.finite(event.reward)
                if self.record.status in ("starting", "restarting"):
                    self.record.status = "running"
                if time.monotonic() - self._recorded_at >= RECORD_EVERY_S:
                    self._update_record()
                elif not self._record_due:  # the last step of a burst is written too, a moment later
                    self._record_due = True
                    asyncio.get_running_loop().call_later(RECORD_EVERY_S, self._flush_record)
            case m.Paused():
                self._update_record(status="paused", step=event.step)
            case m.Resumed():
                self._update_record(status="running", step=event.step)
            case m.Complete():
                self.completed = event
            case m.Checkpoint():
                self.saved = True
            case m.Error() if event.fatal:
                self.last_error = event.message
            case _:
                pass

    async def _read_stdout(self, stream: asyncio.StreamReader) -> None:
        while line := await _readline(stream):
            if line.strip():
                self.on_frame(line)
                self.broadcast(line if line.endswith(b"\n") else line + b"\n")

    async def _read_stderr(self, stream: asyncio.StreamReader) -> None:
        while line := await _readline(stream):
            with contextlib.suppress(OSError):
                self.stderr_file.write(line if line.endswith(b"\n") else line + b"\n")
            text = line.decode("utf-8", errors="replace").rstrip("\r\n")
            if text.strip():
                self.last_stderr = text
                self.stderr_count += 1
                data = c.encode(c.StderrLine(line=codec.truncate(text, 4000)))
                self.stderr_tail.append(data)
                self.broadcast(data)

    async def run_worker(self, resume_latest: bool) -> int:
        argv = self.worker_argv + (list(RESUME_LATEST) if resume_latest else [])
        self.completed, self.last_error, self.last_stderr, self.greeted = None, "", "", False
        try:
            self.proc = await asyncio.create_subprocess_exec(
                *argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE, env=self.env, start_new_session=True,
                limit=codec.MAX_LINE_BYTES,
            )
        except OSError as exc:
            self.last_stderr = f"cannot start the worker ({' '.join(argv[:3])}…): {exc}"
            return 1
        self._update_record(worker_pid=self.proc.pid)
        self.broadcast(c.encode(c.WorkerStarted(pid=self.proc.pid)))
        assert self.proc.stdout and self.proc.stderr
        readers = asyncio.ensure_future(asyncio.gather(
            self._read_stdout(self.proc.stdout), self._read_stderr(self.proc.stderr), return_exceptions=True
        ))
        # A process the worker started can hold the pipes open after it is gone: watch the exit too.
        while not readers.done() and self.proc.returncode is None:
            await asyncio.wait([readers], timeout=0.25)
        if self.proc.returncode is not None:
            _kill_group(self.proc.pid)
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.shield(readers), 5.0)
        code = await self.proc.wait()
        _kill_group(self.proc.pid)  # nothing the worker started outlives it
        if self.proc.stdin:
            self.proc.stdin.close()
        return code

    def reason(self, code: int) -> str:
        return self.refused or self.last_error or self.last_stderr or describe(code)

    async def supervise(self) -> int:
        restarts = 0
        resume = False
        while True:
            self._update_record(status="restarting" if resume else "starting")
            code = await self.run_worker(resume)
            a = self.args
            may_restart = restartable(code) and not self.stopping and not self.refused and self.completed is None
            if may_restart and a.restart_on_crash and restarts < a.max_restarts:
                restarts += 1
                exit_frame = c.WorkerExit(
                    code=code, reason=self.reason(code), restart_in_s=a.restart_delay_s, attempt=restarts,
                    max_restarts=a.max_restarts,
                )
                self.pending_exit, self.countdown_ends = exit_frame, time.monotonic() + a.restart_delay_s
                self.restart_answer = asyncio.get_running_loop().create_future()
                self._update_record(status="restarting", exit_code=code, reason=exit_frame.reason)
                self.broadcast(c.encode(exit_frame))
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(asyncio.shield(self.restart_answer), a.restart_delay_s)
                answer = self.restart_answer.result() if self.restart_answer.done() else True
                self.restart_answer, self.pending_exit = None, None
                if answer:
                    resume = True
                    self._update_record(restarts=restarts)
                    continue
                code_status: c.RunStatus = "crashed"
            elif code == Exit.MISTAKE and not self.stopping and self.viewers and await self.await_retry(code):
                resume = self.saved  # a retry continues from this run's checkpoint, if it saved one
                continue
            else:
                code_status = c.status_of_exit(code, self.completed)
                if self.refused or (self.stopping and code_status == "crashed"):  # asked to stop: not a crash
                    code_status = "stopped"
            final = c.WorkerExit(
                code=code, reason="" if code == 0 else self.reason(code), attempt=restarts,
                max_restarts=a.max_restarts, restart_on_crash=a.restart_on_crash, final=True,
            )
            self.pending_exit = final
            self._update_record(status=code_status, exit_code=code, reason=final.reason, worker_pid=0)
            self.broadcast(c.encode(final))
            return code

    async def await_retry(self, code: int) -> bool:
        """A fixable mistake with a viewer attached: it shows the sentence; once the file is fixed a
        retry (``restart``) starts the worker again. The run ends on a cancel, a stop or no viewers left."""
        frame = c.WorkerExit(code=code, reason=self.reason(code), retry=True)
        self.pending_exit, self.restart_answer = frame, asyncio.get_running_loop().create_future()
        self._update_record(status="mistake", exit_code=code, reason=frame.reason, worker_pid=0)
        self.broadcast(c.encode(frame))
        while self.viewers and not self.restart_answer.done():
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(self.restart_answer), 1.0)
        retry = self.restart_answer.result() if self.restart_answer.done() else False
        self.pending_exit, self.restart_answer = None, None
        return retry

    async def main(self) -> int:
        path = c.socket_path(self.out)
        with contextlib.suppress(FileNotFoundError):
            path.unlink()  # a dead supervisor's socket (the launcher checked that none answers)
        old_umask = os.umask(0o177)  # the socket is created 0600, never briefly wider
        try:
            with c.socket_address(path) as address:
                server = await asyncio.start_unix_server(self.serve_viewer, path=address, limit=codec.MAX_LINE_BYTES)
        finally:
            os.umask(old_umask)
        os.chmod(path, 0o600)
        self._update_record(status="starting")
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.on_signal)
        if self.args.wait_viewer > 0:  # `grpo-tui run`: its dashboard sees the run from the first frame
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.first_viewer.wait(), self.args.wait_viewer)
        try:
            code = await self.supervise()
            await asyncio.sleep(LINGER_S)
            deadline = time.monotonic() + 5.0
            while any(v.queue for v in self.viewers) and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
        finally:
            server.close()
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
            for viewer in list(self.viewers):
                viewer.close()
        return code

    def on_signal(self) -> None:
        """SIGTERM/SIGINT to the supervisor: stop the run as a user's stop would (the worker saves)."""
        self.stopping = True
        if self.restart_answer is not None and not self.restart_answer.done():
            self.restart_answer.set_result(False)
        if self.proc and self.proc.returncode is None:
            _kill_group(self.proc.pid, signal.SIGTERM)


def set_items(worker_argv: list[str]) -> list[str]:
    """The ``--set KEY=VALUE`` items of the worker's command line: the run's overrides of its config."""
    return [worker_argv[i + 1] for i, arg in enumerate(worker_argv[:-1]) if arg == "--set"]


def _kill_group(pid: int, sig: int = signal.SIGKILL) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


def _enforce_stop(proc: asyncio.subprocess.Process) -> None:
    """A worker that does not stop when asked (whoever asked, and whether or not a viewer is still
    there): SIGTERM (it saves an emergency checkpoint), then SIGKILL."""
    if proc.returncode is None:
        _kill_group(proc.pid, signal.SIGTERM)
        asyncio.get_running_loop().call_later(10.0, _kill_group, proc.pid)  # a no-op once it is gone


async def _readline(stream: asyncio.StreamReader) -> bytes:
    try:
        return await stream.readline()
    except ValueError:  # a line over the limit: asyncio drops it; say so instead of going silent
        return f"(a line over the {codec.MAX_LINE_BYTES // 2**20} MiB line limit was dropped)\n".encode()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m grpo_tui.tui.supervisor")
    p.add_argument("--output-dir", required=True)
    p.add_argument("--config", default="")
    p.add_argument("--restart-delay", dest="restart_delay_s", type=float, default=5.0)
    p.add_argument("--max-restarts", type=int, default=3)
    p.add_argument("--no-restart", dest="restart_on_crash", action="store_false")
    p.add_argument("--stop-timeout", type=float, default=300.0, help="after a stop command: SIGTERM the worker after S s")
    p.add_argument("--wait-viewer", type=float, default=0.0, help="wait up to S seconds for a viewer before starting")
    p.add_argument("--env-json", default="", help="extra environment for the worker (JSON object)")
    p.add_argument("worker_argv", nargs=argparse.REMAINDER)
    args = p.parse_args(argv)
    if args.worker_argv[:1] == ["--"]:
        args.worker_argv = args.worker_argv[1:]
    if not args.worker_argv:
        p.error("give the worker's command after --")
    return args


def main(argv: list[str] | None = None) -> int:
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # a closed terminal never ends the run
    args = parse_args(argv)
    c.make_private_dir(c.control_dir(args.output_dir))
    return asyncio.run(Supervisor(args).main())


if __name__ == "__main__":
    sys.exit(main())
