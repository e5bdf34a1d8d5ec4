"""The worker process: ``python -m grpo_tui.worker CONFIG [--plain] [--resume WHERE]``.

Protocol frames go to a private copy of the original stdout (``frames.reserve_stdout``); the
asyncio loop owns stdin commands, EOF, signals, the frames and the store, while the training loop
(``loop.TrainingLoop``) runs every MLX call on its own thread (docs/architecture.md, "Processes",
"Protocol").
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import threading
import time
from collections.abc import Callable

from grpo_tui.common.blas import reexec_if_needed
from grpo_tui.protocol import __version__
from grpo_tui.protocol import messages as m
from grpo_tui.protocol.codec import ProtocolError, decode_command
from grpo_tui.protocol.config import Config, ConfigError, load_config
from grpo_tui.protocol.outcome import Exit
from grpo_tui.worker import leftover_processes, ranks
from grpo_tui.worker.frames import Emitter, reserve_stdout
from grpo_tui.worker.loop import TrainingLoop
from grpo_tui.worker.mlx_thread import TrainerFactory, engine_trainer, release_mlx_streams
from grpo_tui.worker.plain_lines import is_json, parse_plain


class StdinAndSignals:
    """The run's inputs, stdin lines, EOF and signals, handed to the training loop's command
    interface (``TrainingLoop.command``, ``input_closed``, ``signalled``, ``abandon``)."""

    def __init__(self, training: TrainingLoop) -> None:
        self.training = training
        self._abandoning: asyncio.Future | None = None

    def on_line(self, line: bytes) -> None:
        if not line.strip():
            return
        text = line.decode("utf-8", errors="replace")
        if is_json(text):
            try:
                self.training.command(decode_command(line))
            except ProtocolError as exc:
                self.training.refuse(f"invalid command: {exc}")
        else:  # a plain-text control line (PAUSE, STOP, ...), for scripts piping into --plain
            self.training.command(parse_plain(text))

    def on_eof(self) -> None:
        self.training.input_closed()

    def on_signal(self, signum: int) -> None:
        if self.training.signalled(signal.Signals(signum).name):
            self._abandoning = asyncio.ensure_future(self.training.abandon())

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
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
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            loop.add_signal_handler(sig, self.on_signal, sig)


async def run_worker(config: Config, emitter: Emitter, plain: bool, make_trainer: TrainerFactory,
                     config_path: str = "config.toml", overrides: list[str] | None = None) -> int:
    """The training loop with its inputs, until the ``complete`` frame."""
    training = TrainingLoop(config, emitter, plain=plain, make_trainer=make_trainer, config_path=config_path,
                            overrides=overrides or [])
    if ranks.is_leader():  # mlx.launch copies stdin to every rank; rank 0 decides (loop.py broadcasts)
        StdinAndSignals(training).start(asyncio.get_running_loop())
    from grpo_tui.worker.engine.scoring import timed_calls  # standard library only, no MLX

    timed_calls.use_main_loop(asyncio.get_running_loop())  # synchronous rewards run on this thread, as in TRL
    try:
        code = await training.run()
    finally:
        timed_calls.use_main_loop(None)
    quiet_teardown(asyncio.get_running_loop())
    leftover_processes.end_and_say(training.run_context.log)
    return code


TEARDOWN_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def quiet_teardown(loop: asyncio.AbstractEventLoop) -> None:
    """The run has said its end (and saved): a second Ctrl-C from here on would only cut the teardown
    short with a KeyboardInterrupt (asyncio's handlers go with its loop), and ``grpo-tui worker``
    would report a death. The signals are blocked while the handlers are swapped for SIG_IGN, so
    none lands in between."""
    if threading.current_thread() is not threading.main_thread():
        return
    signal.pthread_sigmask(signal.SIG_BLOCK, TEARDOWN_SIGNALS)
    try:
        for sig in TEARDOWN_SIGNALS:
            loop.remove_signal_handler(sig)
            signal.signal(sig, signal.SIG_IGN)
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, TEARDOWN_SIGNALS)


def main(argv: list[str] | None = None, make_trainer: TrainerFactory = engine_trainer) -> int:
    parser = argparse.ArgumentParser(prog="python -m grpo_tui.worker", description="grpo-tui headless worker")
    parser.add_argument("config", help="path to config.toml")
    parser.add_argument("--plain", action="store_true", help="human-readable progress instead of frames")
    parser.add_argument(
        "--resume", metavar="WHERE", default=None,
        help='override checkpoint.resume: "latest", a checkpoint path, or "false" (the dashboard '
        "restarts a crashed worker with --resume latest)",
    )
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override one config key (value read as TOML), as grpo-tui run --set")
    ranks.add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        config, problem = load_config(args.config, overrides=args.set), None
        if args.resume:
            config.checkpoint.resume = resume_setting(args.resume)
        ranks.apply_arguments(config, args)
    except ConfigError as exc:
        config, problem = None, exc
    if config is not None and ranks.wanted(config) and not ranks.launched():
        ranks.relaunch(config)  # this process becomes mlx.launch; each rank runs this same command
    if config is not None:
        # Before stdout is reserved and before MLX loads: the re-executed process starts clean.
        reexec_if_needed(config.runtime.blas)
        if ranks.is_generator(config):  # [async]'s generator rank: no frames, no store, no stdin
            from grpo_tui.worker.engine.asynchronous import generator

            return generator.main()
    frames = reserve_stdout()
    if not ranks.is_leader():  # mlx.launch merges every rank's stdout: rank 0 alone writes frames
        os.close(frames)
        frames = os.open(os.devnull, os.O_WRONLY)
    emitter = Emitter(frames, plain=args.plain)
    emitter.emit(m.Hello(protocol_version=m.PROTOCOL_VERSION, worker_version=__version__, pid=os.getpid()))
    try:
        if config is None:
            assert problem is not None
            emitter.emit(m.Error(message=problem.sentence, fatal=True, exit_code=Exit.MISTAKE, kind=problem.kind))
            return Exit.MISTAKE
        return asyncio.run(run_worker(config, emitter, args.plain, make_trainer, args.config, args.set))
    finally:
        release_mlx_streams()
        emitter.close()


def resume_setting(value: str) -> str | bool:
    """``--resume`` as a ``checkpoint.resume`` value."""
    if value.lower() in ("false", "no", "none", "off"):
        return False
    if value == "latest":
        return "latest"
    path = os.path.abspath(value)
    if not os.path.isdir(path):
        raise ConfigError(
            "checkpoint.resume", f"{value!r} (from --resume) is not a checkpoint folder; name a checkpoint-N, final "
            'or emergency-N folder, or use "latest"', kind="resume",
        )
    return path

