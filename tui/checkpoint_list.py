"""The run's checkpoints on disk, described from safetensors headers (no MLX, no tensor loads).

Folder names and ``training_state.json`` follow ``protocol/layout.py`` (docs/architecture.md,
"Checkpoints").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from math import prod
from pathlib import Path

from safetensors import safe_open

from grpo_tui.protocol.layout import OPTIMIZER_FILE, CheckpointFolder, list_checkpoints, read_step


@dataclass(frozen=True)
class CheckpointInfo:
    path: Path
    step: int | None
    kind: str
    size_bytes: int
    parameters: int
    dtypes: tuple[str, ...]


def _weights(folder: Path) -> list[Path]:
    # optimizer state is not part of the model; everything else in safetensors is
    optimizer = OPTIMIZER_FILE.split(".")[0]
    return sorted(p for p in folder.glob("*.safetensors") if not p.name.startswith(optimizer))


def describe(folder: CheckpointFolder, kinds: Mapping[str, str] | None = None) -> CheckpointInfo | None:
    """One checkpoint, or None when it is not listed (a last-good copy is a kept copy of a listed
    one; a damaged one is set aside). ``kinds`` maps paths to announced kinds."""
    if folder.kind is None or folder.kind == "last_good":
        return None
    # the state's step (read leniently: a state of another shape still says it), else the name's
    saved = folder.state.step if folder.state is not None else read_step(folder.path)
    step = saved if saved is not None else folder.name_step
    params, dtypes = 0, set()
    for file in _weights(folder.path):
        try:
            with safe_open(str(file), framework="numpy") as f:
                for key in f.keys():
                    tensor = f.get_slice(key)
                    params += prod(tensor.get_shape())
                    dtypes.add(str(tensor.get_dtype()))
        except Exception:  # a half-written or foreign file: list it without numbers
            continue
    try:
        size = sum(p.stat().st_size for p in folder.path.iterdir() if p.is_file())
    except FileNotFoundError:  # pruned by the worker (keep_last) between the listing and now
        return None
    kind = (kinds or {}).get(str(folder.path), folder.kind)
    return CheckpointInfo(folder.path, step, kind, size, params, tuple(sorted(dtypes)))


def describe_checkpoints(output_dir: str | Path, kinds: Mapping[str, str] | None = None) -> list[CheckpointInfo]:
    """Every checkpoint folder directly under ``output_dir`` (protocol/layout.py's list), described,
    by step (``final`` last)."""
    infos = [info for f in list_checkpoints(output_dir) if (info := describe(f, kinds))]
    return sorted(infos, key=lambda i: (i.step is None, i.step or 0, i.kind))
