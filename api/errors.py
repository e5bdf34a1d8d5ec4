"""``TrainingError``: the one exception the Python API raises for every failure.

A mistake in the arguments (a bad value, a TRL option that would train something else here, a
tracker that is not installed) and a run that ended early are the same type, so a script needs one
``except grpo_tui.TrainingError``. It is also a ``ValueError`` and a ``TypeError``, the types
Python code expects for a bad argument.
"""

from __future__ import annotations

from grpo_tui.protocol.outcome import Exit


class TrainingError(RuntimeError, ValueError, TypeError):
    """A failure of the Python API: ``exit_code`` as ``protocol.outcome.Exit`` (2 a fixable
    mistake, 3 stopped after non-finite steps, 1 a crash); the message is one sentence naming the
    argument, key, file or function, or the worker's own."""

    def __init__(self, message: str, exit_code: int = Exit.MISTAKE) -> None:
        self.exit_code = exit_code
        super().__init__(message)


__all__ = ["TrainingError"]
