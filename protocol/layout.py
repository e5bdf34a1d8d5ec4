"""The run's output folder on disk: file and folder names, and ``training_state.json``.

The worker writes this layout and the dashboard reads it (docs/architecture.md, "Checkpoints" and
"Store"), so both sides take every name from here::

    <output_dir>/
        outputs.db              the run store (protocol/schema.py)
        run.jsonl               every event the worker sent, one JSON line each
        .worker.lock            held (flock) by the one worker training in this folder
        checkpoint-<step>/      periodic and manual checkpoints
        final/                  the checkpoint at the end of the run
        emergency-<step>/       written on a crash or after non-finite steps (``reason``)
        last-good-<step>/       a kept copy of the last good checkpoint (after a NaN emergency)
        previous-<time>/        an earlier run's checkpoints, set aside by ``resume = false``
        damaged-<name>/         a checkpoint that failed to load, set aside by ``resume = "latest"``
        .tmp-<name>/, .old-<name>/  a save in progress / the checkpoint it replaces

Each checkpoint folder holds the model files, ``optimizer.safetensors`` and
``training_state.json``; a folder with a valid ``training_state.json`` is complete.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, get_args

import msgspec

from grpo_tui.protocol import __version__
from grpo_tui.protocol.messages import CheckpointKind, SettingChanged

STORE_FILE = "outputs.db"
RUN_LOG_FILE = "run.jsonl"
LOCK_FILE = ".worker.lock"
STATE_FILE = "training_state.json"
CURRICULUM_FILE = "curriculum.json"  # [curriculum]: every prompt's pass rate and the epoch's draws (worker/engine/prompts/curriculum.py)
OPTIMIZER_FILE = "optimizer.safetensors"
MODEL_WEIGHTS_FILE = "model.safetensors"  # a full fine-tuning checkpoint's weights
ADAPTERS_FILE = "adapters.safetensors"  # a LoRA checkpoint's adapters (the base model is model.path)
FINAL_DIR = "final"
TMP_PREFIX = ".tmp-"  # a checkpoint being written (or deleted); never complete
OLD_PREFIX = ".old-"  # the checkpoint being replaced, until its replacement is in place
PREVIOUS_DIR_FORMAT = "previous-%Y%m%d-%H%M%S"  # time.strftime format

# What a folder's name says it is. "last_good" is a copy of a periodic or manual checkpoint.
FolderKind = Literal["periodic", "final", "emergency", "last_good"]
FOLDER_KINDS: tuple[FolderKind, ...] = get_args(FolderKind)

_PERIODIC, _EMERGENCY, _LAST_GOOD = "checkpoint-", "emergency-", "last-good-"
_NAME = re.compile(r"(?:(checkpoint|last-good)-(\d+)|emergency-(\d+)(?:-.*)?)")


def checkpoint_dir_name(kind: CheckpointKind, step: int) -> str:
    """The folder a checkpoint of ``kind`` at ``step`` is saved to (manual saves share periodic's)."""
    if kind == "final":
        return FINAL_DIR
    return f"{_EMERGENCY if kind == 'emergency' else _PERIODIC}{step}"


def last_good_dir_name(step: int) -> str:
    """The folder a copy of the last good checkpoint (of ``step``) is kept in."""
    return f"{_LAST_GOOD}{step}"


def parse_checkpoint_dir_name(name: str) -> tuple[FolderKind, int | None] | None:
    """(kind, step) from a checkpoint folder's name (step None for ``final``); None otherwise."""
    if name == FINAL_DIR:
        return "final", None
    m = _NAME.fullmatch(name)
    if m is None:
        return None
    if m.group(3) is not None:
        return "emergency", int(m.group(3))
    return ("periodic" if m.group(1) == "checkpoint" else "last_good"), int(m.group(2))


class TrainingState(msgspec.Struct, kw_only=True):
    """What a checkpoint needs besides weights and optimizer to continue exactly.

    The trainer seeds MLX from (seed, step) at every step and ``batch(step)`` is a pure function
    of the step, so (seed, step) *is* the RNG state and the data position."""

    step: int
    epoch: int
    step_in_epoch: int
    kind: str
    run_id: int
    seed: int
    dataset_size: int
    dataset_hash: str
    config_digest: str
    total_steps: int
    epoch_indices_done: list[int] = []  # dataset indices already used in the current epoch
    reason: str = ""  # emergency saves: "nan" (after non-finite steps) or "crash" (weights untouched by the failed step)
    model: dict[str, str] = {}  # the model it was trained from: "path" and "fingerprint" (common/resume_check.py)
    # the live changes applied up to this step (docs/steering.md): a resume goes on with them
    live_changes: list[SettingChanged] = []
    config: dict[str, Any] = {}  # the effective config at this step (the file's, the --set items and the live changes)
    created_at: float = 0.0
    worker_version: str = __version__


class _StepOnly(msgspec.Struct):
    step: int


def encode_state(state: TrainingState) -> bytes:
    """``training_state.json``'s bytes (indented JSON)."""
    return msgspec.json.format(msgspec.json.encode(state))


def write_state(directory: Path, state: TrainingState) -> Path:
    """Write ``directory/training_state.json`` (the caller makes the folder durable)."""
    path = directory / STATE_FILE
    path.write_bytes(encode_state(state))
    return path


def read_state(directory: Path) -> TrainingState | None:
    """The checkpoint's state, or None when the directory is not a complete checkpoint."""
    try:
        return msgspec.json.decode((directory / STATE_FILE).read_bytes(), type=TrainingState)
    except (OSError, msgspec.DecodeError, msgspec.ValidationError):
        return None


def read_step(directory: Path) -> int | None:
    """Just the step of ``training_state.json`` (lenient: any JSON object with an int ``step``)."""
    try:
        return msgspec.json.decode((directory / STATE_FILE).read_bytes(), type=_StepOnly).step
    except (OSError, msgspec.DecodeError, msgspec.ValidationError):
        return None


@dataclass(frozen=True)
class CheckpointFolder:
    """A folder directly under the output folder that is a checkpoint by its name or by its state."""

    path: Path
    kind: FolderKind | None  # what the name says; None for another name (``damaged-<name>``)
    name_step: int | None  # the step in the name (None for ``final/``)
    state: TrainingState | None  # None: not complete (or written in another shape, e.g. by hand)


def list_checkpoints(output_dir: str | Path) -> list[CheckpointFolder]:
    """Every checkpoint folder directly under ``output_dir`` with its state, oldest step first (the
    state's step, else the name's; then the time it was written). Saves in progress (hidden
    folders) are left out. The worker resumes, prunes and sets aside from this list; the
    dashboard's Config tab shows it."""
    root = Path(output_dir)
    if not root.is_dir():
        return []
    found = []
    for path in root.iterdir():
        if path.name.startswith(".") or not path.is_dir():
            continue
        parsed = parse_checkpoint_dir_name(path.name)
        state = read_state(path)
        if parsed is not None or state is not None:
            kind, step = parsed if parsed is not None else (None, None)
            found.append(CheckpointFolder(path, kind, step, state))

    def order(f: CheckpointFolder) -> tuple[bool, int, float]:
        step = f.state.step if f.state is not None else f.name_step
        return step is None, step or 0, f.state.created_at if f.state is not None else 0.0

    return sorted(found, key=order)


def cache_dir(kind: str) -> Path:
    """grpo-tui's cache folder for ``kind`` (``gguf``: converted GGUF models; ``models``: fetched
    model files): ``$GRPO_TUI_CACHE/<kind>``, by default ``~/.cache/grpo-tui/<kind>``."""
    return Path(os.environ.get("GRPO_TUI_CACHE") or Path.home() / ".cache" / "grpo-tui").expanduser() / kind
