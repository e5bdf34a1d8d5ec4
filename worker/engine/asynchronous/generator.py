"""The generator process of [async] (docs/async.md): rank 1 of a two-rank ring, the learner rank 0.
It loads the run as the learner sent it, takes the learner's weights, then rolls out and scores
step after step, up to ``max_staleness`` steps ahead of the learner, taking new weights when they
come (``wire`` says the order). It never writes the store, a checkpoint or a frame, and never prints
on stdout; its log lines travel to the learner with each step's rollouts.

Started by the learner's worker (``learner_side.start_local``: this machine) or by ``mlx.launch``
(``[async] generator_hosts``: the worker's command, whose last rank comes here).
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections import deque
from typing import Any

import mlx.core as mx
import msgspec

from grpo_tui.common.live_settings import set_value
from grpo_tui.protocol.config import Config
from grpo_tui.protocol.messages import LogLevel
from grpo_tui.protocol.outcome import Mistake
from grpo_tui.worker.engine import distributed
from grpo_tui.worker.engine.asynchronous.wire import (Bundle, Failure, GeneratorLost, Go, Hello, Link, Ready, Reply, Start,
                                                      connect, ring_bytes, secret_from_env)
from grpo_tui.worker.engine.collaborators import Collaborators
from grpo_tui.worker.engine.step import scored_step


class Generator:
    """The generator's side of the conversation."""

    def __init__(self, link: Link) -> None:
        self.link = link
        self.logs: list[tuple[str, str]] = []
        self.busy = 0.0  # seconds rolling out and scoring since the last bundle went
        self.blocked = 0.0  # seconds waiting for the learner since then

    def log(self, level: LogLevel, message: str) -> None:
        self.logs.append((level, message))  # the learner logs them with the step's rollouts

    def serve(self) -> None:
        from grpo_tui.worker.engine.trainer import load_collaborators

        hello: Hello = self.link.receive(Hello)
        config = msgspec.convert(hello.config, Config)
        try:
            c = load_collaborators(config, self.log, ranks=distributed.Ranks())
        except Exception as exc:  # noqa: BLE001 - said to the learner in its turn, after its Start
            start = self.link.receive(Start)
            self.link.send(failure(exc))
            return
        c.policy.keep_logprobs = True  # the learner corrects for the lag with them
        start = self.link.receive(Start)
        self.link.send(Ready())
        self.link.receive_weights(c.policy.model)
        self.run(c, start.policy_step)

    def run(self, c: Collaborators, policy_step: int) -> None:
        """Steps ``policy_step + 1`` on, each bundle sent in turn; between a send and the learner's
        answer, the steps that ``max_staleness`` allows are rolled out ahead. A step that fails is
        said in the generator's next turn to speak, in place of its rollouts."""
        queue: deque[Bundle] = deque()
        ahead = policy_step + 1  # the next step to roll out
        failed: Failure | None = None

        def roll_next() -> None:
            nonlocal ahead, failed
            try:
                queue.append(self.roll(c, ahead, policy_step))
                ahead += 1
            except Exception as exc:  # noqa: BLE001
                failed = failure(exc)

        roll_next()
        while True:
            if failed is not None and not queue:
                self.link.send(failed)
                return
            if not queue:
                return  # the last step went
            bundle = queue.popleft()
            bundle.metrics["async/queue_depth"] = float(len(queue))
            total = self.busy + self.blocked
            bundle.metrics["async/generator_busy"] = self.busy / total if total > 0 else 1.0
            bundle.logs, self.logs = self.logs, []
            self.busy = self.blocked = 0.0
            self.link.send(bundle)
            k = c.config.async_.max_staleness
            while failed is None and ahead <= c.prompts.total_steps and ahead - 1 - policy_step <= k and len(queue) < k:
                roll_next()
            t0 = time.perf_counter()
            reply: Reply = self.link.receive(Reply)
            if reply.weights:
                self.link.send(Go())
                self.link.receive_weights(c.policy.model)
                policy_step = reply.policy_step
            self.blocked += time.perf_counter() - t0
            if reply.changes:
                self.follow(c, reply.changes)
            if not queue and failed is None and ahead <= c.prompts.total_steps:  # nothing ready: the next step, now
                roll_next()

    def roll(self, c: Collaborators, step: int, policy_step: int) -> Bundle:
        """Step ``step``'s scored rollouts, sampled by the weights of ``policy_step``."""
        t0 = time.perf_counter()
        c.begin_step(step)
        epoch, _, indices = c.prompts.batch(step)
        selection = scored_step(c, step, indices, lambda phase: None)
        judge = c.scorer.judge_seconds()
        self.busy += time.perf_counter() - t0
        return Bundle(
            step=step, policy_step=policy_step, epoch=epoch, examples=selection.examples,
            completions=selection.completions, totals=selection.totals, per_fn=selection.per_fn,
            logged_metrics=selection.logged.metrics, logged_extras=selection.logged.extras,
            slots=selection.slots, padding=sorted(selection.padding), rounds=selection.rounds,
            informative=selection.informative, generation_s=selection.generation_s, scoring_s=selection.scoring_s,
            metrics={"judge/seconds": judge} if judge is not None else {},
        )

    def follow(self, c: Collaborators, changes: dict[str, Any]) -> None:
        """The learner's live changes of a boundary, applied here as there (``worker/live_settings``)."""
        for key, value in changes.items():
            set_value(c.config, key, value)
        for part in (c.scorer, c.prompts, c.policy):
            part.follow(list(changes))


def failure(exc: Exception) -> Failure:
    if isinstance(exc, Mistake):
        return Failure(message=exc.sentence, mistake_kind=exc.kind)
    import traceback

    return Failure(message="".join(traceback.format_exception(exc)))


def _die_with_learner() -> None:
    """On Linux the kernel ends this process when the learner's worker dies, even by kill -9; elsewhere
    the ring's lost connection ends it at the next word."""
    if sys.platform.startswith("linux") and os.environ.get("GRPO_TUI_GENERATOR_LOCAL") == "1":
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
        if os.getppid() == 1:
            sys.exit(1)


def main() -> int:
    """``python -m grpo_tui.worker.engine.asynchronous.generator``, or ``mlx.launch``'s rank 1 of a
    [async] worker (the environment names its ring; a local generator's, the learner's socket too)."""
    _die_with_learner()
    secret = secret_from_env()
    group = mx.distributed.init(strict=True, backend="ring")
    if secret is None:  # mlx.launch's rank: the learner says it over the ring
        secret = ring_bytes(group, 0).decode()
    return serve(Link(group, 0, connect(secret)))


def serve(link: Link) -> int:
    """The generator, until the learner stops it or goes."""
    generator = Generator(link)
    try:
        generator.serve()
    except GeneratorLost:  # the learner ended (its run stopped, or it died): so does this
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
