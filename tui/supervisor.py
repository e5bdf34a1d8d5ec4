"""The run's supervisor: owns the worker, restarts it after a crash, serves it to any number of viewers.

    python -m grpo_tui.tui.supervisor --output-dir DIR [--restart-delay S] ... -- WORKER_ARGV...

It imports no Textual and no MLX (the protocol, common/ and the standard library only), so it is small and
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

Its collaborators, one concern each: ``supervisor_worker.WorkerProcess`` (the worker process and its
pipes), ``supervisor_viewers.ViewerHub`` (the control socket's viewers and their queues) and
``supervisor_record.RecordKeeper`` (``supervisor.json``). This module keeps what the worker's frames
say about the run and the restart policy.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import sys
from pathlib import Path

from grpo_tui.common.last_frame import log_size, silent_death
from grpo_tui.protocol import codec
from grpo_tui.protocol import control as c
from grpo_tui.protocol import messages as m
from grpo_tui.protocol.layout import RUN_LOG_FILE
from grpo_tui.protocol.outcome import Exit, describe, restartable
from grpo_tui.tui.supervisor_record import RecordKeeper
from grpo_tui.tui.supervisor_viewers import ViewerHub
from grpo_tui.tui.supervisor_worker import WorkerProcess

LINGER_S = 1.0  # after the run ends: time for viewers to read the last frames


class Supervisor:
    """The run: its worker (``WorkerProcess``), its viewers (``ViewerHub``) and its record
    (``RecordKeeper``) are collaborators; what the worker's frames say and the restart policy are its own."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.out = Path(args.output_dir).resolve()
        worker_argv: list[str] = list(args.worker_argv)
        self.record = RecordKeeper(self.out, args.config, worker_argv)
        self.viewers = ViewerHub(self.welcome, self.command, lambda n: self.record.update(viewers=n))
        self.worker = WorkerProcess(
            worker_argv, {**os.environ, "PYTHONUNBUFFERED": "1", **json.loads(args.env_json or "{}")},
            c.control_dir(self.out) / c.STDERR_FILE, on_line=self.on_line, on_stderr=self.viewers.stderr_line,
        )
        self.restart_answer: asyncio.Future[bool] | None = None
        self.stopping = False
        self.refused = ""
        self.completed: m.Complete | None = None
        self.last_error = ""
        self.silent = ""  # the current worker ended without its last frame: what to say instead
        self.greeted = False  # the current worker's first frame was checked
        self.saved = False  # a checkpoint of this run exists (a mistake's retry resumes from it)
        self.frames = 0  # the worker frames broadcast so far (all workers of this run)
        self.display: m.SampleDisplay | None = None  # the run's sample display, as its worker last said
        self._display_task: asyncio.Future[None] | None = None

    # ------------------------------------------------------------ viewers

    def welcome(self) -> m.Welcome:
        rec = self.record.record
        return m.Welcome(supervisor_pid=os.getpid(), worker_pid=self.worker.pid, jsonl_offset=rec.jsonl_offset,
                         frames=self.frames, restarts=rec.restarts)

    async def command(self, line: bytes) -> None:
        try:
            cmd = codec.decode_viewer_command(line)
        except codec.ProtocolError:
            return
        if isinstance(cmd, m.Restart):
            if self.restart_answer is not None and not self.restart_answer.done():
                self.restart_answer.set_result(cmd.now)
            return
        if isinstance(cmd, m.Stop):
            if not self.stopping:
                self.worker.enforce_stop(self.args.stop_timeout)
            self.stopping = True
            self.record.update(status="stopping")
            if self.restart_answer is not None and not self.restart_answer.done():
                self.restart_answer.set_result(False)
        await self.worker.send(cmd)

    # ------------------------------------------------------------ the worker's frames

    def on_line(self, line: bytes) -> None:
        self.on_frame(line)
        self.viewers.broadcast(line if line.endswith(b"\n") else line + b"\n")

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
                self.worker.kill()
                return
        self.record.on_event(event)
        match event:
            case m.Init():
                if self.display is None:
                    self.display = event.sample_display
                elif event.sample_display not in (None, self.display):
                    # a restarted worker starts with the config's mode: the run keeps the one a viewer chose
                    self._display_task = asyncio.ensure_future(self.worker.send(m.SetSampleDisplay(mode=self.display)))
            case m.SampleDisplayChanged():
                self.display = event.mode
            case m.Complete():
                self.completed = event
            case m.Checkpoint():
                self.saved = True
            case m.Error() if event.fatal:
                self.last_error = event.message
            case _:
                pass

    async def run_worker(self, resume_latest: bool) -> int:
        """One worker, start to end: its exit code, believed only with its last frame (a worker that
        greeted and then ended without ``complete`` or a fatal ``error`` died: a crash, whatever its
        code, with ``silent`` saying so; common/last_frame.py)."""
        self.completed, self.last_error, self.greeted, self.silent = None, "", False, ""
        log = self.out / RUN_LOG_FILE
        offset = log_size(log)
        if not (pid := await self.worker.start(resume_latest)):
            return 1
        self.record.update(worker_pid=pid)
        self.viewers.broadcast(codec.encode(m.WorkerStarted(pid=pid)))
        code = await self.worker.wait()
        if self.greeted and not self.refused and self.completed is None and not self.last_error:
            self.silent = silent_death(code, self.worker.tail(), log, offset)
            return Exit.CRASH if code in set(Exit) else code
        return code

    def reason(self, code: int) -> str:
        return self.refused or self.last_error or self.silent or self.worker.last_stderr or describe(code)

    # ------------------------------------------------------------ the restart policy

    async def supervise(self) -> int:
        restarts = 0
        resume = False
        while True:
            self.record.update(status="restarting" if resume else "starting")
            code = await self.run_worker(resume)
            a = self.args
            may_restart = restartable(code) and not self.stopping and not self.refused and self.completed is None
            if may_restart and a.restart_on_crash and restarts < a.max_restarts:
                restarts += 1
                exit_frame = m.WorkerExit(
                    code=code, reason=self.reason(code), restart_in_s=a.restart_delay_s, attempt=restarts,
                    max_restarts=a.max_restarts,
                )
                self.restart_answer = asyncio.get_running_loop().create_future()
                self.record.update(status="restarting", exit_code=code, reason=exit_frame.reason)
                self.viewers.show_exit(exit_frame)
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(asyncio.shield(self.restart_answer), a.restart_delay_s)
                answer = self.restart_answer.result() if self.restart_answer.done() else True
                self.restart_answer = None
                self.viewers.clear_exit()
                if answer:
                    resume = True
                    self.record.update(restarts=restarts)
                    continue
                code_status: c.RunStatus = "crashed"
            elif code == Exit.MISTAKE and not self.stopping and self.viewers and await self.await_retry(code):
                resume = self.saved  # a retry continues from this run's checkpoint, if it saved one
                continue
            else:
                code_status = c.status_of_exit(code, self.completed)
                if self.refused or (self.stopping and code_status == "crashed"):  # asked to stop: not a crash
                    code_status = "stopped"
            # a stop the user asked for is said as one, never with an older stderr line of the run
            said = "" if code == 0 else describe(code) if code_status == "stopped" and not self.refused else self.reason(code)
            final = m.WorkerExit(
                code=code, reason=said, attempt=restarts,
                max_restarts=a.max_restarts, restart_on_crash=a.restart_on_crash, final=True,
            )
            self.record.update(status=code_status, exit_code=code, reason=final.reason, worker_pid=0)
            self.viewers.show_exit(final)
            return code

    async def await_retry(self, code: int) -> bool:
        """A fixable mistake with a viewer attached: it shows the sentence; once the file is fixed a
        retry (``restart``) starts the worker again. The run ends on a cancel, a stop or no viewers left."""
        frame = m.WorkerExit(code=code, reason=self.reason(code), retry=True)
        self.restart_answer = asyncio.get_running_loop().create_future()
        self.record.update(status="mistake", exit_code=code, reason=frame.reason, worker_pid=0)
        self.viewers.show_exit(frame)
        while self.viewers and not self.restart_answer.done():
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(self.restart_answer), 1.0)
        retry = self.restart_answer.result() if self.restart_answer.done() else False
        self.restart_answer = None
        self.viewers.clear_exit()
        return retry

    async def main(self) -> int:
        path = c.socket_path(self.out)
        with contextlib.suppress(FileNotFoundError):
            path.unlink()  # a dead supervisor's socket (the launcher checked that none answers)
        old_umask = os.umask(0o177)  # the socket is created 0600, never briefly wider
        try:
            with c.socket_address(path) as address:
                server = await asyncio.start_unix_server(self.viewers.serve, path=address, limit=codec.MAX_LINE_BYTES)
        finally:
            os.umask(old_umask)
        os.chmod(path, 0o600)
        self.record.update(status="starting")
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.on_signal)
        if self.args.wait_viewer > 0:  # `grpo-tui run`: its dashboard sees the run from the first frame
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.viewers.first_viewer.wait(), self.args.wait_viewer)
        try:
            code = await self.supervise()
            await asyncio.sleep(LINGER_S)
            await self.viewers.drain(5.0)
        finally:
            server.close()
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
            self.viewers.close()
        return code

    def on_signal(self) -> None:
        """SIGTERM/SIGINT to the supervisor: stop the run as a user's stop would (the worker saves)."""
        self.stopping = True
        if self.restart_answer is not None and not self.restart_answer.done():
            self.restart_answer.set_result(False)
        if self.worker.pid:
            self.worker.kill(signal.SIGTERM)


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
