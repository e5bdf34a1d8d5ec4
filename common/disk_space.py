"""A full disk, said as one sentence naming the path and the free space (docs/errors.md, "A full
disk"): at start (``output_dir_problem``, and the supervisor that could not write a word), in the
store, a checkpoint or any other write of the worker (``full_disk``). The worker makes it a fixable
mistake (exit 2, never restarted: the same disk would fail the same way); its last whole checkpoint
and its store stay as they were (a checkpoint is written to a temporary sibling first, each step's
rows in one transaction).
"""

from __future__ import annotations

import errno
import shutil
from pathlib import Path

from grpo_tui.protocol.outcome import Mistake

MIN_FREE_BYTES = 1 << 20  # below this a run cannot even write its lock, log and first frames


def human(n: int) -> str:
    """``n`` bytes as people read them: ``512 bytes``, ``3.1 MB``, ``2.0 GB``."""
    if n < 1000:
        return f"{n} bytes"
    for unit in ("kB", "MB", "GB", "TB"):
        n_ = n / 1000
        if n_ < 1000 or unit == "TB":
            return f"{n_:.1f} {unit}"
        n = int(n_)
    return f"{n} bytes"


def free_bytes(path: str | Path) -> int | None:
    """Free bytes on the disk that holds ``path`` (or its nearest existing parent)."""
    existing = Path(path).resolve()
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    try:
        return shutil.disk_usage(existing).free
    except OSError:
        return None


def full_sentence(path: str | Path, what: str = "") -> str:
    free = free_bytes(path)
    there = f"{human(free)} free on that disk" if free is not None else "the free space is unknown"
    return (f"the disk is full: {what or 'a file'} could not be written to {path} ({there}); free some space or set "
            "checkpoint.output_dir to a disk with room, then start the run again (it resumes from its last whole "
            "checkpoint)")


def is_full(exc: BaseException, path: str | Path) -> bool:
    """Whether ``exc`` says that a write did not fit: ENOSPC or EDQUOT, SQLite's "database or disk is
    full", or MLX's "[write] Unable to write" (no errno) when ``path``'s disk is nearly full."""
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    text = str(exc)
    if "database or disk is full" in text:
        return True
    if "Unable to write" in text:
        free = free_bytes(path)
        return free is not None and free < 64 * MIN_FREE_BYTES
    return False


def too_little_space(output_dir: str | Path) -> str | None:
    """At start: a disk with less than ``MIN_FREE_BYTES`` free cannot hold a run."""
    free = free_bytes(output_dir)
    if free is not None and free < MIN_FREE_BYTES:
        return (f"checkpoint.output_dir: the disk of {output_dir} is full ({human(free)} free); free some space or "
                "choose a folder on a disk with room")
    return None


class DiskFull(Mistake):
    """A write that did not fit: a fixable mistake (exit 2) whose sentence names the path and the
    free space (``full_sentence``)."""

    def __init__(self, sentence: str) -> None:
        super().__init__("output", sentence)
