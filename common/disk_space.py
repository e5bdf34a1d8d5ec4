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

from grpo_tui.protocol.config import Config
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


def checkpoint_bytes(config: Config) -> int | None:
    """About one checkpoint of a full fine-tuning run: its weights, AdamW's two moments as large, and
    the synced reference (``grpo.sync_ref_model``), from the model folder's safetensors files. None
    for LoRA (its adapters are small) or a model that is not a local safetensors folder."""
    folder = Path(config.model.path)
    if config.model.lora is not None or not folder.is_dir():
        return None
    weights = sum(f.stat().st_size for f in folder.glob("*.safetensors"))
    if not weights:
        return None
    return weights * (4 if config.grpo.sync_ref_model else 3)


def checkpoint_space_note(config: Config) -> str | None:
    """``grpo-tui check``'s note when the run's checkpoints would not fit on the output folder's disk:
    ``keep_last`` periodic ones (all of them with keep_last = 0), the final one, and the next one
    written before the oldest goes."""
    each, ckpt = checkpoint_bytes(config), config.checkpoint
    free = free_bytes(ckpt.output_dir)
    if each is None or free is None:
        return None
    steps = config.training.max_steps
    # a run as long as its epochs: at least keep_last saves (the data's size is the worker's to read)
    periodic = (steps // ckpt.save_every if steps > 0 else ckpt.keep_last or 1) if ckpt.save_every else 0
    kept = min(periodic, ckpt.keep_last) if ckpt.keep_last else periodic
    count = kept + 1 + (1 if periodic > kept else 0)
    if count * each <= free:
        return None
    return (f"the run's checkpoints may need about {human(count * each)} ({count} of about {human(each)}: the weights "
            f"and AdamW's two moments{', and the synced reference' if config.grpo.sync_ref_model else ''}) and the disk "
            f"of {ckpt.output_dir} has {human(free)} free; lower checkpoint.keep_last, save less often "
            "(checkpoint.save_every) or free some space")
