"""Checkpoints (docs/architecture.md, "Checkpoints"): atomic directories that ``mlx_lm.load``
opens, and resume discovery.

The folder names and ``training_state.json`` are the on-disk contract in ``protocol/layout.py``:
``<output_dir>/checkpoint-<step>/`` (periodic and manual), ``final/`` and ``emergency-<step>/``
hold the model files written by ``Trainer.save_model``, ``optimizer.safetensors`` and
``training_state.json``. A checkpoint is built in a hidden temporary sibling, fsynced, then
renamed into place: a directory with a valid ``training_state.json`` is always complete.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import time
from pathlib import Path
from typing import IO, Protocol

from grpo_tui.common import disk_space
from grpo_tui.common.commands import resume_command
from grpo_tui.common.resume_check import resumable
from grpo_tui.protocol.config import Config
from grpo_tui.protocol.layout import (
    LOCK_FILE,
    OLD_PREFIX as _OLD,
    OPTIMIZER_FILE,
    PREVIOUS_DIR_FORMAT,
    STATE_FILE,
    TMP_PREFIX as _TMP,
    TrainingState,
    list_checkpoints,
    read_state,
    write_state,
)

DAMAGED_PREFIX = "damaged-"  # a checkpoint that failed to load, set aside (protocol/layout.py's parser skips it)

__all__ = [  # STATE_FILE, TrainingState, read_state: the worker's names for protocol's (resume_check decides what resumes)
    "DAMAGED_PREFIX", "OPTIMIZER_FILE", "STATE_FILE", "Saver", "set_damaged_aside", "TrainingState", "config_digest", "copy_checkpoint",
    "nan_stop_message", "skipped_newer", "prune", "remove_checkpoint", "read_state", "recover_interrupted", "save_checkpoint", "set_aside",
]


class Saver(Protocol):
    def save_model(self, directory: Path) -> None: ...
    def save_optimizer(self, path: Path) -> None: ...


LOCK_WAIT_S = 10.0


def lock_output_dir(directory: Path, wait_s: float = LOCK_WAIT_S) -> IO | None:
    """The output folder's lock file, locked, or None when another worker holds it: one worker per
    output folder, or a second one would corrupt checkpoints and the run row. Keep it open.

    A held lock is retried for ``wait_s``: a worker that was just killed, or restarted after a
    crash, can still be letting go (its ranks see their stdin close and stop within seconds)."""
    directory.mkdir(parents=True, exist_ok=True)
    fd = os.open(directory / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    lock = os.fdopen(fd, "a+")
    deadline = time.monotonic() + wait_s
    while True:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return lock
        except OSError:
            if time.monotonic() >= deadline:
                lock.close()
                return None
            time.sleep(0.2)


def config_digest(config: Config) -> str:
    """Digest of the settings that shape training (not where it is written or how it is shown)."""
    data = {k: v for k, v in config.to_dict().items() if k not in ("checkpoint", "display", "runtime", "store", "name")}
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


def _fsync_tree(directory: Path) -> None:
    for path in sorted(directory.rglob("*"), reverse=True):
        if path.is_file():
            with open(path, "rb") as f:
                os.fsync(f.fileno())
    _fsync_dir(directory)


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _install(tmp: Path, target: Path) -> None:
    """Rename a finished temporary directory into place, replacing an older ``target``."""
    _fsync_tree(tmp)
    old = target.with_name(f"{_OLD}{target.name}")
    if target.exists():
        shutil.rmtree(old, ignore_errors=True)
        os.rename(target, old)  # recover_interrupted() undoes this if we die before the next line
    os.rename(tmp, target)
    _fsync_dir(target.parent)
    shutil.rmtree(old, ignore_errors=True)


def save_checkpoint(trainer: Saver, output_dir: Path, name: str, state: TrainingState) -> Path:
    """Write a complete checkpoint to ``output_dir/name`` atomically. Blocking (MLX thread)."""
    output_dir.mkdir(parents=True, exist_ok=True)
    target = output_dir / name
    tmp = output_dir / f"{_TMP}{name}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        trainer.save_model(tmp)
        trainer.save_optimizer(tmp / OPTIMIZER_FILE)
        state.created_at = time.time()
        write_state(tmp, state)
    except BaseException as exc:
        full = isinstance(exc, Exception) and disk_space.is_full(exc, output_dir)  # before the space comes back
        shutil.rmtree(tmp, ignore_errors=True)  # a full disk needs its space back, not a half checkpoint
        if full:
            written = getattr(exc, "filename", None) or target
            raise disk_space.DiskFull(disk_space.full_sentence(written, f"the checkpoint {name}")) from exc
        raise
    _install(tmp, target)
    return target


def copy_checkpoint(source: Path, output_dir: Path, name: str) -> Path:
    """Copy a checkpoint under a new name, atomically (a kept copy of the last good one)."""
    target = output_dir / name
    tmp = output_dir / f"{_TMP}{name}"
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(source, tmp)
    _install(tmp, target)
    return target


def recover_interrupted(output_dir: Path) -> None:
    """Clean up after a kill mid-save: drop half-written temporaries, restore a replaced one."""
    if not output_dir.is_dir():
        return
    for path in output_dir.iterdir():
        if path.name.startswith(_OLD):
            target = path.with_name(path.name[len(_OLD) :])
            if not target.exists() and read_state(path) is not None:
                os.rename(path, target)
            else:
                shutil.rmtree(path, ignore_errors=True)
        elif path.name.startswith(_TMP):
            shutil.rmtree(path, ignore_errors=True)


def skipped_newer(output_dir: Path, step: int) -> list[Path]:
    """Emergency and last-good checkpoints newer than ``step`` that "latest" passed over."""
    return [f.path for f in list_checkpoints(output_dir)
            if f.state is not None and f.state.step > step and f.kind is not None and not resumable(f.path, f.state)]


def set_damaged_aside(directory: Path) -> Path:
    """Rename a checkpoint that does not load to ``damaged-<name>`` (kept, never picked again)."""
    target = directory.with_name(f"{DAMAGED_PREFIX}{directory.name}")
    if target.exists():
        target = directory.with_name(f"{DAMAGED_PREFIX}{directory.name}-{time.strftime('%Y%m%d-%H%M%S')}")
    os.rename(directory, target)
    return target


def remove_checkpoint(path: Path) -> None:
    """Delete one checkpoint folder; renamed first so a kill mid-delete never leaves a half checkpoint that looks
    complete."""
    trash = path.with_name(f"{_TMP}{path.name}")
    os.rename(path, trash)
    shutil.rmtree(trash, ignore_errors=True)


def prune(output_dir: Path, keep_last: int) -> list[Path]:
    """Delete all but the ``keep_last`` newest periodic checkpoints. Returns what was deleted."""
    if keep_last <= 0:
        return []
    periodic = [f.path for f in list_checkpoints(output_dir) if f.state is not None and f.state.kind == "periodic" and f.kind == "periodic"]
    doomed = periodic[:-keep_last]
    for path in doomed:
        remove_checkpoint(path)
    return doomed


def set_aside(output_dir: Path) -> Path | None:
    """Move an earlier run's checkpoints to ``previous-<time>/`` so a fresh start never resumes
    from them by mistake (and nothing is deleted). Returns the new folder, if any."""
    old = [f.path for f in list_checkpoints(output_dir) if f.state is not None]
    if not old:
        return None
    dest = output_dir / time.strftime(PREVIOUS_DIR_FORMAT)
    dest.mkdir()
    for path in old:
        os.rename(path, dest / path.name)
    return dest


def nan_stop_message(streak: int, emergency: Path, last_good: Path | None, learning_rate: float,
                     config_path: str = "config.toml") -> str:
    """What the run says when it stops after ``streak`` non-finite steps: what was kept and what to do."""
    lower = f"training.learning_rate={learning_rate / 10:g}"
    where = (
        f"resume from the last good checkpoint with a lower learning rate: {resume_command(config_path, last_good, lower)}"
        if last_good is not None
        else f"start again with a lower learning rate (no good checkpoint was saved before the failure): "
             f"{resume_command(config_path, None, lower)}"
    )
    return (
        f"training stopped: {streak} steps in a row had a non-finite loss or gradient (each update was skipped); "
        f"saved {emergency} for inspection. To continue, {where}. \"latest\" never picks this emergency checkpoint."
    )
