"""Which checkpoint a resume picks and whether it fits the config, decided once for the worker
(``worker/start.py``) and for ``grpo-tui check`` (``common/preflight.py``), so both say the same
sentence: ``resume = "latest"`` takes the newest resumable checkpoint whose files are whole; a full
fine-tuning checkpoint resumes only without ``[model.lora]`` and a LoRA one only with it; and a
checkpoint resumes only into the model it was trained from (``training_state.json``'s ``model``:
the path and fingerprint that ``model_identity`` computes).

Standard library only: ``grpo-tui check`` runs without MLX.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from grpo_tui.common.commands import resume_command
from grpo_tui.protocol.layout import ADAPTERS_FILE, MODEL_WEIGHTS_FILE, TrainingState, list_checkpoints, parse_checkpoint_dir_name

Resume = tuple[Path, TrainingState]


def resumable(path: Path, state: TrainingState) -> bool:
    """Whether ``resume = "latest"`` may pick this checkpoint: periodic, manual and final ones, and
    an emergency save after a crash (its weights are the last completed step's). A NaN emergency
    (or an emergency of unknown cause, from before causes were recorded) and last-good copies are
    resumed only by an explicit path, so a restart never loops back into its own failure."""
    parsed = parse_checkpoint_dir_name(path.name)
    if parsed is None:
        return False
    if parsed[0] == "emergency":
        return state.reason == "crash"
    return parsed[0] in ("periodic", "final") and state.kind != "emergency"


def newest_first(output_dir: Path) -> list[Resume]:
    """Every resumable checkpoint, newest first (highest step, then most recently written)."""
    found = [(f.path, f.state) for f in list_checkpoints(output_dir) if f.state is not None and resumable(f.path, f.state)]
    return found[::-1]


def damage(directory: Path) -> str | None:
    """Why the checkpoint at ``directory`` cannot load, found without loading it: a safetensors
    file shorter or longer than its header says (a truncated copy, a full disk), or a header that
    does not parse. None when every file is whole."""
    for path in sorted(directory.glob("*.safetensors")):
        try:
            size = path.stat().st_size
            with open(path, "rb") as handle:
                length = int.from_bytes(handle.read(8), "little")
                if length <= 0 or 8 + length > size:
                    return f"{path.name} is cut short ({size:,} bytes)"
                header = json.loads(handle.read(length))
            end = max((t["data_offsets"][1] for k, t in header.items() if k != "__metadata__"), default=0)
        except (OSError, ValueError, KeyError, TypeError, IndexError) as exc:
            return f"{path.name} does not read ({exc.__class__.__name__}: {exc})"
        if size != 8 + length + end:
            return f"{path.name} is {size:,} bytes where its header says {8 + length + end:,}"
    return None


def damaged(resume: str, why: str, config_path: str) -> str:
    """``checkpoint.resume`` names a checkpoint whose files do not load (``damage``'s ``why``)."""
    return (f"checkpoint.resume: {resume} is damaged ({why}); resume from another checkpoint or start again: "
            f"{resume_command(config_path, None)}")


def latest_whole(output_dir: Path) -> Resume | None:
    """What ``resume = "latest"`` resumes from: the newest resumable checkpoint whose files are
    whole (the worker walks ``newest_first`` the same way, setting each damaged one aside)."""
    return next(((path, state) for path, state in newest_first(output_dir) if damage(path) is None), None)


def _start_again(config_path: str) -> str:
    return f"start again ({resume_command(config_path, None)}: the old checkpoints are set aside)"


def kind_problem(checkpoint: Path, lora: bool, config_path: str) -> str | None:
    """A full fine-tuning checkpoint resumes only without ``[model.lora]`` (``lora``), and a LoRA
    checkpoint (adapters on the base) only with it: the weights of one cannot load as the other."""
    full, adapters = (checkpoint / MODEL_WEIGHTS_FILE).is_file(), (checkpoint / ADAPTERS_FILE).is_file()
    if lora and full and not adapters:
        return (f"{checkpoint} is a full fine-tuning checkpoint ({MODEL_WEIGHTS_FILE}, no LoRA adapters), but "
                f"{config_path} has a [model.lora] table; remove [model.lora] to resume it, or {_start_again(config_path)}")
    if not lora and adapters and not full:
        return (f"{checkpoint} holds LoRA adapters ({ADAPTERS_FILE}), but {config_path} has no [model.lora] table; "
                f"add the one it was trained with to resume it, or {_start_again(config_path)}")
    return None


def model_problem(checkpoint: Path, then: dict[str, str], now: dict[str, str], config_path: str) -> str | None:
    """A checkpoint resumes only into the model it was trained from (``then``, its state's
    ``model``): its weights or adapters would silently replace the model ``model.path`` names now
    (``now``). Nothing is said where either fingerprint is unknown."""
    if not then.get("fingerprint") or not now.get("fingerprint") or then["fingerprint"] == now["fingerprint"]:
        return None
    return (f"{checkpoint} was trained from the model {then.get('path')}, but model.path is now {now.get('path')} "
            f"(another model); to train it, {_start_again(config_path)} or set another checkpoint.output_dir")


def fit_problem(checkpoint: Path, state: TrainingState, lora: bool, model_path: str, config_path: str) -> str | None:
    """Why ``checkpoint`` cannot resume into this config: the other kind (``kind_problem``), or
    another model than a local ``model_path`` folder (``model_problem``; a hub id or a GGUF file is
    checked once loaded)."""
    return kind_problem(checkpoint, lora, config_path) or \
        model_problem(checkpoint, state.model, local_model_identity(model_path), config_path)


# Architecture fields that tell two models apart even where their weight files cannot be read.
_ARCHITECTURE = ("model_type", "hidden_size", "num_hidden_layers", "intermediate_size", "num_attention_heads",
                 "num_key_value_heads", "vocab_size", "head_dim")
_SAMPLE = 1 << 20


def model_identity(folder: Path, config: dict[str, Any]) -> dict[str, str]:
    """What a checkpoint records of the model it came from (``folder``, with its ``config.json``
    read as ``config``): its path and a fingerprint of the config's architecture fields and each
    weight file's name, size and first and last MiB (a different model differs there; hashing
    whole multi-GB files at every start would not pay)."""
    digest = hashlib.sha256(json.dumps({k: config.get(k) for k in _ARCHITECTURE}, sort_keys=True).encode())
    for file in sorted(folder.glob("*.safetensors")):
        size = file.stat().st_size
        digest.update(f"{file.name}:{size}".encode())
        with open(file, "rb") as handle:
            digest.update(handle.read(_SAMPLE))
            handle.seek(max(size - _SAMPLE, 0))
            digest.update(handle.read(_SAMPLE))
    return {"path": str(folder), "fingerprint": digest.hexdigest()[:32]}


def local_model_identity(path: str) -> dict[str, str]:
    """``model_identity`` of ``model.path`` when it is a local model folder (one with a
    ``config.json``, as the worker resolves it); empty for a hub id or a GGUF file, which the
    worker resolves (and checks) at load."""
    folder = Path(path).expanduser()
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
        return model_identity(folder, config) if isinstance(config, dict) else {}
    except (OSError, ValueError):
        return {}
