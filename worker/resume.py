"""Where a run starts: the checkpoint ``checkpoint.resume`` names (``latest``, a path, or a fresh
start with the old checkpoints set aside); docs/architecture.md, "Checkpoints"."""

from __future__ import annotations

from collections.abc import Awaitable
from pathlib import Path
from typing import Any, Callable, Literal

from grpo_tui.protocol import messages as m
from grpo_tui.protocol.config import Config

from . import checkpoint as ckpt


async def find_resume(
    config: Config, output_dir: Path, mlx: Callable[..., Awaitable[Any]], log: Callable[[m.LogLevel, str], None],
    emit: Callable[[m.Event], None],
) -> tuple[Path, ckpt.TrainingState] | None | Literal[False]:
    """The checkpoint to resume from (``checkpoint.resume``), None for a fresh start, False for a bad
    resume path (reported with an ``error`` frame). Runs the file work on the MLX thread (``mlx``)."""
    resume = config.checkpoint.resume
    await mlx(ckpt.recover_interrupted, output_dir)
    if resume is False:
        aside = await mlx(ckpt.set_aside, output_dir)
        if aside is not None:
            log("warning", f"resume = false: earlier checkpoints moved to {aside}")
        return None
    if resume == "latest":
        found = await mlx(ckpt.find_latest, output_dir)
        for path in await mlx(ckpt.skipped_newer, output_dir, found[1].step if found else -1):
            log("info", f"resume = latest: not resuming from {path} (emergency and last-good "
                "checkpoints are resumed only by path: --resume PATH)")
        return found
    state = ckpt.read_state(Path(str(resume)))
    if state is None:
        message = f"checkpoint.resume: {resume} is not a complete checkpoint (no valid {ckpt.STATE_FILE})"
        emit(m.Error(message=message, fatal=True))
        return False
    return Path(str(resume)), state
