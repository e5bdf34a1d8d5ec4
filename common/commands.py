"""The ``grpo-tui run`` command lines the program prints for a user to type again (a NaN stop, a
damaged store or checkpoint, a checkpoint that does not fit the config). Standard library only:
``grpo-tui check`` prints the same sentences as the worker, without MLX.
"""

from __future__ import annotations

import shlex
from pathlib import Path


def run_command(config_path: str, *sets: str) -> str:
    """The command line that runs ``config_path`` again with ``sets`` (``KEY=VALUE``, as ``--set``
    reads them), in backquotes: a sentence's punctuation is never taken as part of it."""
    return "`" + " ".join([f"grpo-tui run {shlex.quote(config_path)}", *(f"--set {shlex.quote(s)}" for s in sets)]) + "`"


def resume_command(config_path: str, checkpoint: Path | None, *extra: str) -> str:
    """A command line that runs ``config_path`` again from ``checkpoint`` (None: from scratch)."""
    return run_command(config_path, f"checkpoint.resume={checkpoint if checkpoint is not None else 'false'}", *extra)
