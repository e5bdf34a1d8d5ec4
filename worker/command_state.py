"""Live control: what each dashboard command does to the run, as a small pure state machine.

The worker loop reads the flags between steps; ``handle`` only flips them and says what to
answer right away. Answers that need the step to finish (``paused``, ``checkpoint``,
``complete``) are sent by the loop when it gets there.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from typing import Literal

from grpo_tui.protocol import messages as m
from grpo_tui.worker.trainer_contract import Generation

StopReason = Literal["stop", "eof", "signal", "nan", "silent", "doctor"]


@dataclass
class CommandState:
    display: m.SampleDisplay = "best_worst"
    step: int = 0  # last completed step
    stepping: bool = False  # a training step is running in the MLX thread
    pause_requested: bool = False
    paused: bool = False
    save_requested: bool = False
    stop_reason: StopReason | None = None

    def handle(self, command: m.Command) -> list[m.Event]:
        """Apply one command; return the frames to send now (an ``error`` when it makes no sense)."""
        if isinstance(command, m.SetSampleDisplay):
            self.display = command.mode
            return [m.SampleDisplayChanged(mode=command.mode), _log("info", f"sample display: {command.mode}")]
        if self.stop_reason is not None:
            return [_refuse(command, "the run is stopping")]
        if isinstance(command, m.Pause):
            if self.paused or self.pause_requested:
                return [_refuse(command, "the run is already paused")]
            self.pause_requested = True
            return [_log("info", f"pause requested: pausing {self._after()}")]
        if isinstance(command, m.Resume):
            if self.paused:
                self.paused = False
                return [m.Resumed(step=self.step)]
            if self.pause_requested:  # not paused yet: cancel the request
                self.pause_requested = False
                return [_log("info", "pause cancelled"), m.Resumed(step=self.step)]
            return [_refuse(command, "the run is not paused")]
        if isinstance(command, m.SaveCheckpoint):
            if self.save_requested:
                return [_refuse(command, "a checkpoint is already requested")]
            self.save_requested = True
            return [_log("info", f"checkpoint requested: saving {self._after()}")]
        if isinstance(command, m.Stop):
            self.stop(reason="stop")
            return [_log("info", f"stop requested: stopping {self._after()}")]
        return [_refuse(command, "unknown command")]  # pragma: no cover - the union is closed

    def stop(self, reason: StopReason) -> None:
        if self.stop_reason is None:
            self.stop_reason = reason
        self.paused = False
        self.pause_requested = False

    def take_pause(self) -> bool:
        """At a step boundary: enter the paused state if it was requested."""
        if self.pause_requested and self.stop_reason is None:
            self.pause_requested, self.paused = False, True
            return True
        return False

    def _after(self) -> str:
        return f"after step {self.step + 1} finishes" if self.stepping else "at the next step boundary"


def _log(level: m.LogLevel, message: str) -> m.Log:
    return m.Log(level=level, message=message, time=time.time())


def _refuse(command: m.Command, why: str) -> m.Error:
    name = command.__class__.__name__
    tag = "".join("_" + c.lower() if c.isupper() else c for c in name).lstrip("_")
    return m.Error(message=f"cannot {tag.replace('_', ' ')}: {why}", fatal=False)


def choose_samples(generations: list[Generation], mode: m.SampleDisplay, rng: random.Random) -> list[Generation]:
    """The generations streamed as ``sample`` frames: all, the best and worst, or two at random."""
    if mode == "all" or len(generations) <= 1:
        return list(generations)
    if mode == "random":
        return rng.sample(generations, 2)

    def key(g: Generation) -> float:  # unscored completions rank lowest
        return g.reward if g.reward is not None and g.reward == g.reward else float("-inf")

    best = max(generations, key=key)
    worst = min(reversed(generations), key=key)
    return [best] if best is worst else [best, worst]
