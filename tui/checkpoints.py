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

from grpo_tui.protocol.layout import OPTIMIZER_FILE, parse_checkpoint_dir_name, read_step


@dataclass(frozen=True)
class CheckpointInfo:
    path: Path
    step: int | None
    kind: str
    size_bytes: int
    parameters: int
    dtypes: tuple[str, ...]


def _kind_and_step(folder: Path) -> tuple[str, int | None] | None:
    found = parse_checkpoint_dir_name(folder.name)
    if found is None or found[0] == "last_good":  # a kept copy of a listed checkpoint: not listed again
        return None
    return found


def _weights(folder: Path) -> list[Path]:
    # optimizer state is not part of the model; everything else in safetensors is
    optimizer = OPTIMIZER_FILE.split(".")[0]
    return sorted(p for p in folder.glob("*.safetensors") if not p.name.startswith(optimizer))


def describe(folder: Path, kinds: Mapping[str, str] | None = None) -> CheckpointInfo | None:
    """One checkpoint folder, or None when it is not one. ``kinds`` maps paths to announced kinds."""
    found = _kind_and_step(folder)
    if found is None or not folder.is_dir():
        return None
    kind, step = found
    if (saved := read_step(folder)) is not None:  # the state's step; the name's when there is none
        step = saved
    params, dtypes = 0, set()
    for file in _weights(folder):
        try:
            with safe_open(str(file), framework="numpy") as f:
                for key in f.keys():
                    tensor = f.get_slice(key)
                    params += prod(tensor.get_shape())
                    dtypes.add(str(tensor.get_dtype()))
        except Exception:  # a half-written or foreign file: list it without numbers
            continue
    size = sum(p.stat().st_size for p in folder.iterdir() if p.is_file())
    kind = (kinds or {}).get(str(folder), kind)
    return CheckpointInfo(folder, step, kind, size, params, tuple(sorted(dtypes)))


def list_checkpoints(output_dir: str | Path, kinds: Mapping[str, str] | None = None) -> list[CheckpointInfo]:
    """Every checkpoint folder directly under ``output_dir``, by step (``final`` last)."""
    root = Path(output_dir)
    if not root.is_dir():
        return []
    infos = [info for p in root.iterdir() if (info := describe(p, kinds))]
    return sorted(infos, key=lambda i: (i.step is None, i.step or 0, i.kind))

