"""What can be checked about a run's folders before anything loads, by the worker at start and by
``grpo-tui check``: an output folder that cannot hold a run, and a model that lives inside an
output folder whose checkpoints a fresh start moves aside (README, "When something goes wrong").
Each problem is one sentence naming the key and what to do."""

from __future__ import annotations

import os
from pathlib import Path

from .config import Config
from .layout import parse_checkpoint_dir_name

_NO_FILES = ("/proc", "/sys", "/dev")  # virtual file systems: nothing can be saved there


def output_dir_problem(output_dir: str | Path) -> str | None:
    """Why ``checkpoint.output_dir`` cannot hold a run, or None."""
    path = Path(output_dir)
    key = f"checkpoint.output_dir: {path}"
    if path.exists() and not path.is_dir():
        return f"{key} is a file, not a folder; name a folder (it is created if missing)"
    resolved = path.resolve()
    for root in _NO_FILES:
        if resolved == Path(root) or str(resolved).startswith(root + "/"):
            return f"{key} is under {root}, which cannot hold files; choose another folder"
    existing = resolved
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        return f"{key} cannot be created: {existing} is a file; choose another folder"
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"{key} cannot be written ({existing} is read-only for this user); choose a folder you can write to"
    return None


def model_inside_output_problem(config: Config) -> str | None:
    """A fresh start (``resume = false``) moves the output folder's checkpoints aside: a model that
    is one of them (``runs/x/final``) would be moved away from under ``model.path``."""
    if config.checkpoint.resume is not False:
        return None
    model, out = Path(config.model.path).resolve(), Path(config.checkpoint.output_dir).resolve()
    if out not in model.parents:
        return None
    top = model.relative_to(out).parts[0]
    if parse_checkpoint_dir_name(top) is None:
        return None
    return (f"model.path {config.model.path} is inside checkpoint.output_dir {config.checkpoint.output_dir}, whose "
            "checkpoints resume = false moves aside into previous-.../; copy the model out of it, or set "
            "checkpoint.output_dir to another folder")


def folder_problems(config: Config) -> list[str]:
    return [p for p in (output_dir_problem(config.checkpoint.output_dir), model_inside_output_problem(config)) if p]
