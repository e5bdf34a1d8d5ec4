"""How a run ends: one exit code per kind, the same for ``grpo-tui worker``, ``grpo-tui run`` and a
multi-rank launch (the launcher exits with the worst rank's), and who may restart it.

The kinds (docs/architecture.md, "Processes"; README, "When something goes wrong"):

- ``DONE`` (0): the run trained to its end.
- ``CRASH`` (1): a bug or the machine (an exception nobody expected, a native crash). The only kind
  that is restarted from the latest checkpoint.
- ``MISTAKE`` (2): a fixable mistake (config, model, data, reward or tool file, a reward function
  that raises or hangs while scoring, memory budget, ranks, output folder). One sentence names the key, file, column or line and what to do; the traceback
  goes to the run's log only; never restarted.
- ``NAN_STOP`` (3): the run stopped itself after non-finite steps (an emergency checkpoint kept).
- ``STOPPED`` (4): stopped by the user (``q``, ``STOP``) or a signal, after a checkpoint that
  ``resume = "latest"`` picks.
- ``UNREWARDED`` (5): ``training.silent_patience`` steps in a row where no completion earned a
  reward (every one at the run's lowest, at most 0): the task is too hard for the model as it is.
  Not a mistake in a file, not restarted. (A run that solved its task, every completion at the
  run's best reward for as many steps, is done: 0.)
- ``DOCTOR`` (6): the run doctor ended the run on a finding as severe as ``doctor.stop_on``
  (docs/doctor.md), after a checkpoint that ``resume = "latest"`` picks. Not restarted.

A process killed by a signal before it could say anything (exit status 128 + N, or a negative
return code from ``subprocess``) is a crash.
"""

from __future__ import annotations

from enum import IntEnum
from typing import Literal


class Exit(IntEnum):
    DONE = 0
    CRASH = 1
    MISTAKE = 2
    NAN_STOP = 3
    STOPPED = 4
    UNREWARDED = 5
    DOCTOR = 6


MistakeKind = Literal["config", "model", "data", "reward", "tool", "memory", "ranks", "output", "resume"]


class Mistake(Exception):
    """A fixable mistake: ``str(exc)`` is one sentence that names the key, file, column or line and
    what to do. Raised anywhere in the worker; reported once (no traceback on screen), exit 2."""

    def __init__(self, kind: MistakeKind, sentence: str) -> None:
        self.kind = kind
        self.sentence = sentence
        super().__init__(sentence)


def restartable(code: int | None) -> bool:
    """True only for a crash: a mistake, a NaN stop, a user's stop or a finished run is never
    restarted (the same input would fail the same way, or the user asked for the stop)."""
    if code is None:
        return False
    if code < 0 or code > 128:  # killed by a signal (subprocess's -N, or a shell's 128 + N)
        return True
    return code == Exit.CRASH or code not in set(Exit)


def describe(code: int) -> str:
    """A few words for an exit code, for ``grpo-tui ls`` and the crash dialog."""
    if code < 0:
        return f"killed by signal {-code}"
    if code > 128:
        return f"killed by signal {code - 128}"
    try:
        return {
            Exit.DONE: "done",
            Exit.CRASH: "crashed",
            Exit.MISTAKE: "stopped on a fixable mistake",
            Exit.NAN_STOP: "stopped after non-finite steps",
            Exit.STOPPED: "stopped",
            Exit.UNREWARDED: "stopped: no completion earned a reward",
        }[Exit(code)]
    except ValueError:
        return f"exited with code {code}"
