"""The worker process: ``python -m grpo_tui.worker CONFIG [--plain]``.

Protocol frames go to a private copy of the original stdout (``frames.reserve_stdout``); the
asyncio loop owns stdin commands, EOF, signals, the frames and the store, while the training loop
(``loop.TrainingLoop``) runs every MLX call on its own thread. DESIGN §3, §4.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
import threading
import time

from grpo_tui.protocol import __version__
from grpo_tui.protocol import messages as m
from grpo_tui.protocol.blas import reexec_if_needed
from grpo_tui.protocol.codec import ProtocolError, decode_command
from grpo_tui.protocol.config import ConfigError, load_config

from .frames import Emitter, reserve_stdout
from .loop import EMERGENCY_AFTER_STEPS, TrainingLoop


class Worker(TrainingLoop):
    """The training loop plus its inputs: stdin commands, EOF and signals."""

    # ------------------------------------------------------------ input: commands, EOF, signals

    def on_line(self, line: bytes) -> None:
        if not line.strip():
            return
        try:
            command = decode_command(line)
        except ProtocolError as exc:
            self.emit(m.Error(message=f"invalid command: {exc}", fatal=False))
            return
        for event in self.control.handle(command):
            if isinstance(event, m.Log):
                self.log(event.level, event.message)
            else:
                self.emit(event)
        self.wake.set()

    def on_eof(self) -> None:
        if self.plain:  # nobody drives a plain run through stdin; /dev/null must not stop it
            return
        if self.control.stop_reason is None:
            self.log("warning", "stdin closed (the dashboard is gone): saving a checkpoint and exiting")
        self.control.stop("eof")
        self.wake.set()

    def on_signal(self, signum: int) -> None:
        name = signal.Signals(signum).name
        busy = self.control.stepping or self.trainer is None  # a step, or loading: can't interrupt MLX
        pending = self._steps_since_checkpoint() + (1 if self.control.stepping else 0)
        worth_waiting = pending > EMERGENCY_AFTER_STEPS and self.control.stop_reason != "signal"
        self.exit_code = 128 + signum
        if busy and not worth_waiting:
            self.log("warning", f"{name}: exiting now; nothing worth saving is lost")
            self._abandoning = asyncio.ensure_future(self._abandon())
            return
        self.log("warning", f"{name}: stopping {'after the running step' if self.control.stepping else 'now'}")
        self.control.stop("signal")
        self.wake.set()

    async def _abandon(self) -> None:
        """Exit without waiting for the MLX thread; the store never saw the unfinished step."""
        await self._finish_store("stopped")
        self.emit(m.Complete(total_steps=self.step, seconds=time.time() - self.started, status="stopped"))
        self.emitter.close()
        os._exit(self.exit_code)

    def _start_input(self, loop: asyncio.AbstractEventLoop) -> None:
        # A thread, not loop.connect_read_pipe: stdin may be a file, /dev/null or a tty. Raw
        # os.read, not sys.stdin: a thread blocked inside a buffered reader aborts interpreter exit.
        def read() -> None:
            pending = b""
            try:
                while chunk := os.read(0, 1 << 16):
                    *lines, pending = (pending + chunk).split(b"\n")
                    for line in lines:
                        loop.call_soon_threadsafe(self.on_line, line)
                if pending:
                    loop.call_soon_threadsafe(self.on_line, pending)
                loop.call_soon_threadsafe(self.on_eof)
            except (RuntimeError, OSError):  # loop closed, or no usable stdin
                pass

        threading.Thread(target=read, name="stdin", daemon=True).start()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.on_signal, sig)

    # ------------------------------------------------------------ the run

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        self._start_input(loop)
        try:
            if not await self._start():
                return 2
            return await self._train()
        except Exception as exc:  # noqa: BLE001 - anything else is a crash, reported once
            return await self._crash(exc)
        finally:
            if self.store is not None:
                await self.store.close()
            await self.mlx(release_mlx_streams)
            self.executor.shutdown(wait=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m grpo_tui.worker", description="grpo-tui headless worker")
    parser.add_argument("config", help="path to config.toml")
    parser.add_argument("--plain", action="store_true", help="human-readable progress instead of frames")
    parser.add_argument(
        "--resume", metavar="WHERE", default=os.environ.get(RESUME_OVERRIDE),
        help='override checkpoint.resume: "latest", a checkpoint path, or "false" (the dashboard '
        f"restarts a crashed worker with {RESUME_OVERRIDE}=latest)",
    )
    args = parser.parse_args(argv)
    try:
        config, problem = load_config(args.config), None
        if args.resume:
            config.checkpoint.resume = resume_setting(args.resume)
    except ConfigError as exc:
        config, problem = None, exc
    if config is not None:
        # Before stdout is reserved and before MLX loads: the re-executed process starts clean.
        reexec_if_needed(config.runtime.blas)
    emitter = Emitter(reserve_stdout(), plain=args.plain)
    emitter.emit(m.Hello(protocol_version=m.PROTOCOL_VERSION, worker_version=__version__, pid=os.getpid()))
    try:
        if config is None:
            emitter.emit(m.Error(message=f"config error: {problem}", fatal=True))
            return 2
        return asyncio.run(Worker(config, emitter, plain=args.plain).run())
    finally:
        release_mlx_streams()
        emitter.close()


RESUME_OVERRIDE = "GRPO_TUI_RESUME"


def resume_setting(value: str) -> str | bool:
    """``--resume`` / GRPO_TUI_RESUME as a ``checkpoint.resume`` value."""
    if value.lower() in ("false", "no", "none", "off"):
        return False
    if value == "latest":
        return "latest"
    path = os.path.abspath(value)
    if not os.path.isdir(path):
        raise ConfigError("checkpoint.resume", f"{value!r} (from --resume) is not a checkpoint folder")
    return path


def release_mlx_streams() -> None:
    """Destroy the MLX streams of the calling thread. MLX aborts the process at exit, now and then,
    when streams made on a thread outlive it (ml-explore/mlx#3126); each thread clears its own."""
    mx = sys.modules.get("mlx.core")
    if mx is not None and hasattr(mx, "clear_streams"):
        mx.clear_streams()
