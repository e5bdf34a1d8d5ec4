"""The learner's side of [async] (docs/async.md): it starts the generator (a process of its own on
this machine, or ``mlx.launch``'s last rank on ``generator_hosts``), sends it the run and its
weights, and trains each step on the scored rollouts the generator sent, at most ``max_staleness``
optimizer steps old; after each step it answers with the boundary's live changes and, every
``weight_sync_steps`` steps, its new weights.

What is in flight at a pause waits (the generator holds at most ``max_staleness`` steps ready and
goes on after the resume); at a stop or the end it is dropped with the generator process; a resume
rolls the queue out again from the checkpoint's weights (the prompts of a step are a function of
the step, so it is the same prompts).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable

import mlx.core as mx

from grpo_tui.common.live_settings import value_at
from grpo_tui.protocol.config import Config
from grpo_tui.protocol.messages import Phase
from grpo_tui.protocol.outcome import Mistake
from grpo_tui.worker.engine.asynchronous.wire import (SECRET_ENV, Bundle, Failure, GeneratorLost, Go, Hello, Link, Listener,
                                                      Ready, Reply, Start, ring_bytes)
from grpo_tui.worker.engine.collaborators import Collaborators
from grpo_tui.worker.engine.models.plan import SHARED_CORES_ENV
from grpo_tui.worker.engine.dynamic_sampling import Selection
from grpo_tui.worker.engine.scoring.reward_call import StepLog
from grpo_tui.worker.engine.step import Sampled, learn
from grpo_tui.worker.trainer_contract import StepOutput

JOIN_TIMEOUT_S = 120.0  # the generator's process joining the ring (MLX imported, nothing loaded yet)


class GeneratorCrashed(RuntimeError):
    """The generator stopped on something other than a user's mistake: a crash of the run."""


class Started:
    """The link to a generator that has the run's config, and its process when this worker started it."""

    def __init__(self, link: Link, process: subprocess.Popen[bytes] | None) -> None:
        self.link = link
        self.process = process

    def stop(self) -> None:
        """End the generator (this worker's child; a rank of mlx.launch ends when its link closes)."""
        self.link.sock.close()
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def start(config: Config) -> Started:
    """Start the generator and give it the run (before this side loads the model: both load at once)."""
    if config.async_.generator_hosts:  # mlx.launch started every rank; this is rank 0
        group = mx.distributed.init(strict=True, backend="ring")
        listener = Listener(_own_address())
        ring_bytes(group, 1, listener.secret().encode())  # the generator learns where to connect
        started = Started(Link(group, 1, listener.accept(time.monotonic() + JOIN_TIMEOUT_S)), None)
    else:
        started = _start_local()
    started.link.send(Hello(config=config.to_dict()))
    return started


def _own_address() -> str:
    """Rank 0's address in ``mlx.launch``'s ring hostfile: where the generator's host reaches this one."""
    hosts = json.loads(Path(os.environ["MLX_HOSTFILE"]).read_text())
    return str(hosts[0][0]).rsplit(":", 1)[0]


def _free_ports(n: int) -> list[int]:
    sockets = [socket.socket() for _ in range(n)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def _start_local() -> Started:
    """The generator as a child process, rank 1 of a ring on 127.0.0.1; its hostfile in a private
    folder, the socket's secret in its environment."""
    folder = Path(tempfile.mkdtemp(prefix="grpo-tui-ring-"))  # 0700: another local user cannot swap it
    hostfile = folder / "hosts.json"
    hostfile.write_text(json.dumps([[f"127.0.0.1:{port}"] for port in _free_ports(2)]))
    listener = Listener("127.0.0.1")
    env = {**SHARED_CORES_ENV, **os.environ, "MLX_RANK": "1", "MLX_HOSTFILE": str(hostfile),
           "GRPO_TUI_GENERATOR_LOCAL": "1", SECRET_ENV: listener.secret()}
    process = subprocess.Popen([sys.executable, "-m", "grpo_tui.worker.engine.asynchronous.generator"], env=env,
                               stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)  # stdout: the frames' alone
    joined: dict[str, Any] = {}

    def join() -> None:
        try:
            joined["group"] = mx.distributed.init(strict=True, backend="ring")
        except Exception as exc:  # noqa: BLE001
            joined["error"] = exc

    saved = {k: os.environ.get(k) for k in ("MLX_RANK", "MLX_HOSTFILE")}
    os.environ.update(MLX_RANK="0", MLX_HOSTFILE=str(hostfile))
    deadline = time.monotonic() + JOIN_TIMEOUT_S
    try:
        thread = threading.Thread(target=join, name="ring", daemon=True)
        thread.start()
        while thread.is_alive():
            thread.join(0.1)
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                raise GeneratorCrashed(f"the generator process ended before it joined (exit {process.poll()}); "
                                       "the worker's log has its output")
    finally:
        for k, v in saved.items():  # this process is no rank of mlx.launch's (``ranks.launched``)
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        hostfile.unlink(missing_ok=True)
        folder.rmdir()
    if "error" in joined:
        process.kill()
        raise joined["error"]
    try:
        sock = listener.accept(deadline, alive=lambda: process.poll() is None)
    except BaseException as exc:
        process.kill()
        if isinstance(exc, GeneratorLost):
            raise GeneratorCrashed(f"the generator process did not connect (exit {process.wait()}); "
                                   "the worker's log has its output") from None
        raise
    return Started(Link(joined["group"], 1, sock), process)


class AsyncSteps:
    """``train_step`` for [async]: the generator's rollouts of the step in, one update, the answer out."""

    def __init__(self, parts: Collaborators, started: Started) -> None:
        self.parts = parts
        self.started = started
        self.link = started.link
        self.began = False
        self.changes: dict[str, Any] = {}  # the live changes the next answer carries
        self.cycle_from: float | None = None  # when the last answer went
        self.weights_owed = False  # the last answer announced weights the generator has not taken yet
        cfg = parts.config
        if cfg.environment is not None or cfg.tools:
            parts.log("warning", f"async.max_staleness = {cfg.async_.max_staleness} with multi-turn rollouts "
                                 "([environment] or [[tools]]): their tokens carry no sampling log-probabilities, so the "
                                 "off-policy correction cannot act, and the guess_sum example learned far less "
                                 "asynchronously (docs/async.md, \"When it helps\"); compare with a synchronous run")

    def train_step(self, step: int, on_phase: Callable[[Phase], None]) -> StepOutput:
        c = self.parts
        c.begin_step(step)
        if not self.began:  # the weights of the step before (a resume's checkpoint's)
            self.link.send(Start(policy_step=step - 1))
            self._receive(Ready)
            self.link.send_weights(c.learner.model)
            self.began = True
        on_phase("generating")  # waiting for the generator's rollouts of the step
        t0 = time.perf_counter()
        bundle: Bundle = self._receive(Bundle)
        waited = time.perf_counter() - t0
        cycle_from = self.cycle_from if self.cycle_from is not None else t0
        for level, message in bundle.logs:
            c.log(level, f"generator: {message}")  # type: ignore[arg-type]
        staleness = float(step - 1 - bundle.policy_step)
        metrics = {**bundle.metrics, "async/staleness_mean": staleness, "async/staleness_max": staleness,
                   "async/wait_ms": waited * 1000}
        output = learn(c, step, bundle.epoch, selection(bundle, c), on_phase, sampled=Sampled(bundle.policy_step, metrics))
        # the weights go when the generator waits for them (its Go, before the next step's rollouts)
        self.weights_owed = step % c.config.async_.weight_sync_steps == 0
        self.link.send(Reply(policy_step=step, weights=self.weights_owed, changes=self.changes))
        self.changes = {}
        now = time.perf_counter()
        cycle = now - cycle_from
        output.metrics.extra_metrics["async/learner_busy"] = max(cycle - waited, 0.0) / cycle if cycle > 0 else 1.0
        self.cycle_from = now
        return output

    def _receive(self, kind: type[Any]) -> Any:
        message = self.link.receive(Bundle | Failure | Ready | Go)
        if isinstance(message, Go) and self.weights_owed:  # then the message that was due
            self.link.send_weights(self.parts.learner.model)
            self.weights_owed = False
            message = self.link.receive(Bundle | Failure | Ready)
        if isinstance(message, Failure):
            if message.mistake_kind is not None:
                raise Mistake(message.mistake_kind, message.message)  # type: ignore[arg-type]
            self.parts.log("error", f"generator: {message.message}")
            raise GeneratorCrashed("the generator process crashed (its traceback is in the log above)")
        if not isinstance(message, kind):
            raise GeneratorCrashed(f"the generator sent {type(message).__name__} where {kind.__name__} was due")
        return message

    def follow(self, keys: list[str]) -> None:
        """Live changes of this boundary: the generator takes them with the step's answer."""
        for key in keys:
            self.changes[key] = value_at(self.parts.config, key)

    def close(self) -> None:
        """What is in flight is dropped with the generator (a resume rolls it out again)."""
        self.started.stop()


def selection(bundle: Bundle, c: Collaborators) -> Selection:
    logged = StepLog(len(bundle.completions), lambda message: c.log("warning", message), bundle.logged_metrics,
                     bundle.logged_extras)
    return Selection(examples=bundle.examples, completions=bundle.completions, totals=bundle.totals, per_fn=bundle.per_fn,
                     logged=logged, slots=bundle.slots, padding=set(bundle.padding), rounds=bundle.rounds,
                     informative=bundle.informative, generation_s=bundle.generation_s, scoring_s=bundle.scoring_s)
