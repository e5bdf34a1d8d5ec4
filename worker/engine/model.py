"""Model loading, LoRA, the frozen reference copy, and saving what ``mlx_lm.load`` opens."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten
from mlx_lm import load as mlx_load
from mlx_lm.tuner.utils import linear_to_lora_layers

from grpo_tui.protocol.config import LoraConfig, ModelConfig

from . import model_source
from .accel.patches import row_major_weight_grads

TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "vocab.json",
    "merges.txt",
    "tokenizer.model",
    "added_tokens.json",
    "chat_template.jinja",
    "generation_config.json",
)


def display_name(path: str) -> str:
    """A short name: the folder name of a local path, the hub id as given."""
    p = Path(path)
    return p.name if p.exists() else path


def source_dir(model_path: str) -> Path:
    """The local folder of the model (a hub id's snapshot in the Hugging Face cache)."""
    return model_source.resolve(model_path)


def _load(path: str) -> tuple[nn.Module, Any]:
    """Stock mlx-lm; the trainer applies the plan's ``accel.patches``."""
    folder = model_source.resolve(path)
    try:
        model, tokenizer = mlx_load(str(folder))
    except Exception as exc:  # a folder without weights, weights that do not fit the config...
        raise RuntimeError(f"cannot load model {path!r} from {folder}: {exc.__class__.__name__}: {exc}") from exc
    return model, tokenizer


def load(config: ModelConfig) -> tuple[nn.Module, Any]:
    """The policy model (LoRA layers added when ``config.lora``) and its tokenizer. Unavailable
    models, architectures mlx-lm lacks and full fine-tuning of a quantized model fail first, in
    one sentence (``model_source``)."""
    model_source.inspect_model(config)
    model, tokenizer = _load(config.path)
    row_major_weight_grads(model)
    if config.lora is not None:
        add_lora(model, config.lora)
    return model, tokenizer


def load_reference(config: ModelConfig) -> nn.Module:
    """A frozen copy of the starting weights, for the KL term (beta > 0)."""
    model, _ = _load(config.path)
    model.freeze()
    model.eval()
    return model


def lora_parameters(lora: LoraConfig) -> dict[str, Any]:
    """mlx-lm's LoRA config. mlx-lm scales the update by ``scale``; PEFT's ``alpha`` is scale · rank."""
    params: dict[str, Any] = {"rank": lora.rank, "scale": lora.alpha / lora.rank, "dropout": lora.dropout}
    if lora.keys is not None:
        params["keys"] = list(lora.keys)
    return params


def num_lora_layers(model: nn.Module, lora: LoraConfig) -> int:
    return len(model.layers) if lora.layers == -1 else min(lora.layers, len(model.layers))


def add_lora(model: nn.Module, lora: LoraConfig) -> None:
    model.freeze()
    linear_to_lora_layers(model, num_lora_layers(model, lora), lora_parameters(lora))


def trainable_weights(model: nn.Module) -> dict[str, mx.array]:
    return dict(tree_flatten(model.trainable_parameters()))


def save(model: nn.Module, tokenizer: Any, config: ModelConfig, directory: Path) -> None:
    """Write into an existing ``directory`` what ``mlx_lm.load`` needs.

    Full fine-tuning: ``config.json`` + ``model.safetensors`` + tokenizer files; ``mlx_lm.load(dir)``
    opens it. LoRA: ``adapters.safetensors`` + ``adapter_config.json`` (mlx-lm's format, with the base
    model's path) + the base ``config.json`` and tokenizer; ``mlx_lm.load(base, adapter_path=dir)``.
    """
    directory = Path(directory)
    src = source_dir(config.path)
    shutil.copy(src / "config.json", directory / "config.json")
    tokenizer.save_pretrained(str(directory))
    for name in TOKENIZER_FILES:  # keep files save_pretrained does not write (e.g. chat_template.jinja)
        if (src / name).exists() and not (directory / name).exists():
            shutil.copy(src / name, directory / name)
    if config.lora is None:
        weights = dict(tree_flatten(model.parameters()))
        mx.save_safetensors(str(directory / "model.safetensors"), weights, metadata={"format": "mlx"})
        return
    mx.save_safetensors(str(directory / "adapters.safetensors"), trainable_weights(model))
    adapter_config = {
        "fine_tune_type": "lora",
        "num_layers": num_lora_layers(model, config.lora),
        "lora_parameters": lora_parameters(config.lora),
        "model": config.path,
    }
    (directory / "adapter_config.json").write_text(json.dumps(adapter_config, indent=2))


def load_weights(model: nn.Module, config: ModelConfig, directory: Path) -> None:
    """Restore what ``save`` wrote (model weights, or the LoRA adapters on top of the base)."""
    directory = Path(directory)
    if config.lora is None:
        model.load_weights(str(directory / "model.safetensors"))
    else:
        model.load_weights(str(directory / "adapters.safetensors"), strict=False)
    mx.eval(model.parameters())
