"""Where a model comes from and whether it can be trained as configured, checked before loading.

- ``resolve``: ``model.path`` is a local folder, a GGUF file (or a folder holding one, converted once
  into a cached mlx-lm folder by ``gguf``) or a Hugging Face id (``org/name``) found in the hub
  cache (``HF_HOME``/``HF_HUB_CACHE``) or downloaded into it; with ``HF_HUB_OFFLINE=1`` only the
  cache is read. A model found nowhere is one sentence naming the id and what was tried.
- ``check_architecture``: a ``model_type`` mlx-lm has no module for is one sentence naming it.
- ``check_quantized``: full fine-tuning of a quantized model would train only its few unquantized
  tensors (norms, biases), so it is a config error that says to use ``[model.lora]`` (QLoRA) or
  ``model.dequantize``.
"""

from __future__ import annotations

import importlib.util
import json
import math
from functools import lru_cache
from pathlib import Path
from typing import Any

from grpo_tui.common import preflight, resume_check
from grpo_tui.protocol.config import ModelConfig
from grpo_tui.protocol.outcome import Mistake
from grpo_tui.worker.engine.models import gguf

HUB_ID_HELP = "a local model folder, a GGUF file or a Hugging Face id like Qwen/Qwen3-0.6B"

# what resolving a GGUF model did (converted, or found converted), for the run's log
NOTES: dict[str, str] = {}


class ModelSourceError(Mistake, RuntimeError):
    """The model cannot be found or loaded, a fixable mistake; the message is one sentence naming it."""

    def __init__(self, sentence: str) -> None:
        super().__init__("model", sentence)


def _offline() -> bool:
    """HF_HUB_OFFLINE as the hub library itself reads it (once, at import)."""
    from huggingface_hub import constants

    return bool(constants.HF_HUB_OFFLINE)


@lru_cache(maxsize=None)
def resolve(path: str) -> Path:
    """The local folder holding ``path``: the folder itself, or the hub snapshot of an id. Looked up
    once per process (failures are not kept): the trainer counts the parameters, checks and loads
    the model, and every checkpoint copies its files, each through here, and a hub id online is a
    request each time."""
    local = Path(path).expanduser()
    if local.exists():
        gguf_file = gguf.find_file(local)
        if gguf_file is not None:
            return gguf.converted(gguf_file, log=lambda line: NOTES.__setitem__(path, line))
        if not (local / "config.json").exists():
            raise ModelSourceError(preflight.no_config_json(local))
        if any(local.glob("*.safetensors")) and (problem := preflight.model_files_problem(local)) is not None:
            raise ModelSourceError(problem)  # before mlx-lm reads it: its errors name neither
        return local
    if path.count("/") != 1 or path.startswith(("/", ".", "~")):
        raise ModelSourceError(f"model {path!r} was not found: it is neither an existing folder nor {HUB_ID_HELP}")
    from huggingface_hub import constants, snapshot_download
    from mlx_lm.utils import DEFAULT_ALLOW_PATTERNS  # what mlx_lm.load reads, so nothing more is fetched

    cache = constants.HF_HUB_CACHE
    try:
        return Path(snapshot_download(path, allow_patterns=DEFAULT_ALLOW_PATTERNS, local_files_only=_offline()))
    except Exception as exc:  # noqa: BLE001 — the hub raises a dozen kinds; all mean "not available"
        if _offline():
            raise ModelSourceError(preflight.offline_and_not_cached(path, cache)) from None
        if preflight.hub_unreachable():  # what check says too
            raise ModelSourceError(preflight.unreachable_and_not_cached(path, cache, preflight.hub_endpoint())) from None
        raise ModelSourceError(
            f"model {path!r} was not found: it is not a local folder or in the Hugging Face cache ({cache}), "
            f"and downloading it failed ({exc.__class__.__name__}: {str(exc).splitlines()[0] if str(exc) else ''})"
        ) from None


def read_config(folder: Path) -> dict[str, Any]:
    try:
        return json.loads((Path(folder) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ModelSourceError(f"cannot read {Path(folder) / 'config.json'} ({exc.__class__.__name__}: {exc})") from None


def check_architecture(folder: Path, config: dict[str, Any]) -> str:
    """The model type; ``ModelSourceError`` when this mlx-lm cannot build it."""
    from importlib.metadata import version

    from mlx_lm.utils import MODEL_REMAPPING

    model_type = config.get("model_type")
    if not model_type:
        raise ModelSourceError(f"{Path(folder) / 'config.json'} names no model_type, so mlx-lm cannot tell the architecture")
    module = MODEL_REMAPPING.get(model_type, model_type)
    if importlib.util.find_spec(f"mlx_lm.models.{module}") is None:
        raise ModelSourceError(
            f"model type {model_type!r} ({Path(folder) / 'config.json'}) is not supported by mlx-lm "
            f"{version('mlx-lm')}, which has no mlx_lm.models.{module} module; a newer mlx-lm may add it"
        )
    return str(model_type)


def check_quantized(model: ModelConfig, config: dict[str, Any]) -> None:
    """Full fine-tuning of a quantized model is a config error (one sentence, names the fix)."""
    if (error := preflight.quantized_full_finetune(model, config)) is not None:
        raise error


def identity(path: str) -> dict[str, str]:
    """What a checkpoint records of the model it came from (``common/resume_check.py``'s
    ``model_identity`` of the folder ``path`` resolves to); empty when it cannot be found."""
    try:
        folder = resolve(path)
        config = read_config(folder)
    except ModelSourceError:
        return {}
    return resume_check.model_identity(folder, config)


def context_length(path: str) -> int | None:
    """The positions the model was trained for: ``max_position_embeddings`` (``text_config``'s for
    a multimodal config), stretched by a YaRN ``rope_scaling`` factor; None when the config does not
    say (nothing is checked then)."""
    try:
        config = read_config(resolve(path))
    except ModelSourceError:
        return None
    config = config.get("text_config", config) if "max_position_embeddings" not in config else config
    length = config.get("max_position_embeddings")
    if not isinstance(length, int) or length <= 0:
        return None
    scaling = config.get("rope_scaling") or {}
    kind = scaling.get("rope_type", scaling.get("type")) if isinstance(scaling, dict) else None
    factor = scaling.get("factor") if isinstance(scaling, dict) else None
    if kind == "yarn" and isinstance(factor, (int, float)) and factor > 1:
        original = scaling.get("original_max_position_embeddings", length)
        length = max(length, int(original * factor))
    return length


def parameter_count(path: str, dequantized: bool = False) -> int | None:
    """The values in the model's safetensors files, read from their headers (nothing is loaded; a
    quantized tensor counts its packed values, as the loaded model's ``size`` does, or with
    ``dequantized`` the float values it becomes: its scales times the group size); None when the
    model cannot be found or read, so that loading it says why."""
    try:
        folder = resolve(path)
        files = sorted(folder.glob("*.safetensors"))
        q = preflight.quantization(read_config(folder)) or {} if dequantized else {}
        total = 0
        for file in files:
            with open(file, "rb") as handle:
                header = json.loads(handle.read(int.from_bytes(handle.read(8), "little")))
            header.pop("__metadata__", None)
            for name, t in header.items():
                module, _, kind = name.rpartition(".")
                if q and f"{module}.scales" in header:
                    if kind == "weight":
                        group = (q.get(module) or {}).get("group_size", q.get("group_size", 64))
                        total += math.prod(header[f"{module}.scales"]["shape"]) * int(group)
                    continue  # scales and biases vanish with the dequantization
                total += math.prod(t["shape"])
    except (ModelSourceError, OSError, ValueError, KeyError, TypeError):
        return None
    return total if files else None


def inspect_model(model: ModelConfig) -> tuple[Path, str]:
    """Resolve and check ``model`` before the slow load: (local folder, model type)."""
    folder = resolve(model.path)
    config = read_config(folder)
    model_type = check_architecture(folder, config)
    check_quantized(model, config)
    return folder, model_type
