"""Model loading, LoRA, the frozen reference copy, and saving what ``mlx_lm.load`` opens."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten, tree_unflatten
from mlx_lm import load as mlx_load

from grpo_tui.common import preflight
from grpo_tui.protocol.config import LoraConfig, ModelConfig
from grpo_tui.worker.engine.models import gguf, model_source
from grpo_tui.worker.engine.accel.patches import row_major_weight_grads

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
    except FileNotFoundError as exc:  # a folder without weights: the user's to fix
        raise model_source.ModelSourceError(preflight.no_weights(folder)) from exc
    except Exception as exc:  # weights that do not fit the config...
        raise RuntimeError(f"cannot load model {path!r} from {folder}: {exc.__class__.__name__}: {exc}") from exc
    return model, tokenizer


DTYPES = {"float32": mx.float32, "bfloat16": mx.bfloat16, "float16": mx.float16}


def dequantized(model: nn.Module, dtype: mx.Dtype) -> nn.Module:
    """``model`` with every quantized linear and embedding replaced by a float one of ``dtype``
    (mlx-lm's ``dequantize_model``, computed in float32 so that the float16 scales of a GGUF file
    lose nothing before the cast)."""
    from mlx_lm.models.switch_layers import QuantizedSwitchLinear, SwitchLinear

    replaced = []
    for name, module in model.named_modules():
        if isinstance(module, nn.QuantizedLinear):
            cls: Any = nn.Linear
        elif isinstance(module, nn.QuantizedEmbedding):
            cls = nn.Embedding
        elif isinstance(module, QuantizedSwitchLinear):
            cls = SwitchLinear
        else:
            continue
        biases = module.biases.astype(mx.float32) if module.biases is not None else None
        weight = mx.dequantize(module.weight, module.scales.astype(mx.float32), biases, module.group_size,
                               module.bits, mode=getattr(module, "mode", "affine")).astype(dtype)
        new = cls.__new__(cls)
        nn.Module.__init__(new)
        new.weight = weight
        if "bias" in module:
            new.bias = module.bias.astype(dtype)
        replaced.append((name, new))
    if replaced:
        model.update_modules(tree_unflatten(replaced))
    return model


def _as_configured(model: nn.Module, config: ModelConfig) -> nn.Module:
    """``model.dequantize`` and ``model.dtype`` applied (the float weights cast, norms included)."""
    if config.dequantize:
        model = dequantized(model, DTYPES[config.dtype or "float32"])
    if config.dtype is not None:
        model.set_dtype(DTYPES[config.dtype])
    mx.eval(model.parameters())
    return model


def load(config: ModelConfig) -> tuple[nn.Module, Any]:
    """The policy model (LoRA layers added when ``config.lora``) and its tokenizer. Unavailable
    models, architectures mlx-lm lacks and full fine-tuning of a quantized model fail first, in
    one sentence (``model_source``)."""
    model_source.inspect_model(config)
    model, tokenizer = _load(config.path)
    model = _as_configured(model, config)
    row_major_weight_grads(model)
    if config.lora is not None:
        add_lora(model, config.lora)
    return model, tokenizer


def load_reference(config: ModelConfig) -> nn.Module:
    """A frozen copy of the starting weights, for the KL term (beta > 0)."""
    model, _ = _load(config.path)
    model = _as_configured(model, config)
    model.freeze()
    model.eval()
    return model


def mix_into_reference(reference: nn.Module, policy: nn.Module, alpha: float) -> None:
    """TRL's ``SyncRefModelCallback`` (TR-DPO): every reference weight becomes
    ``alpha * policy + (1 - alpha) * reference``, in float32, stored in the reference's dtype."""
    current = dict(tree_flatten(policy.parameters()))
    mixed = []
    for name, old in tree_flatten(reference.parameters()):
        new = alpha * current[name].astype(mx.float32) + (1.0 - alpha) * old.astype(mx.float32)
        mixed.append((name, new.astype(old.dtype)))
    reference.update(tree_unflatten(mixed))
    mx.eval(reference.parameters())


def lora_parameters(lora: LoraConfig) -> dict[str, Any]:
    """mlx-lm's LoRA config. mlx-lm scales the update by ``scale``; PEFT's ``alpha`` is scale · rank."""
    params: dict[str, Any] = {"rank": lora.rank, "scale": lora.alpha / lora.rank, "dropout": lora.dropout}
    if lora.keys is not None:
        params["keys"] = list(lora.keys)
    return params


def num_lora_layers(model: nn.Module, lora: LoraConfig) -> int:
    return len(model.layers) if lora.layers == -1 else min(lora.layers, len(model.layers))


def add_lora(model: nn.Module, lora: LoraConfig) -> None:
    # mlx-lm's tuner imports wandb (and swanlab) when installed: a second or more of every worker's
    # start, paid only by the runs that train adapters
    from mlx_lm.tuner.utils import linear_to_lora_layers

    model.freeze()
    layers = num_lora_layers(model, lora)
    linear_to_lora_layers(model, layers, lora_parameters(lora))
    if lora.keys is not None and not tree_flatten(model.trainable_parameters()):
        names = [n for n, m in model.layers[-1].named_modules() if isinstance(m, (nn.Linear, nn.QuantizedLinear)) and n]
        raise preflight.lora_keys_match_nothing(lora, layers, names)


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
    model_config = model_source.read_config(src)
    if config.dequantize or config.dtype is not None:  # the saved weights are float, of this type
        model_config.pop("quantization", None)
        model_config.pop("quantization_config", None)
        model_config["torch_dtype"] = config.dtype or ("float32" if config.dequantize else model_config.get("torch_dtype"))
    (directory / "config.json").write_text(json.dumps(model_config, indent=2))
    tokenizer.save_pretrained(str(directory))
    for name in (*TOKENIZER_FILES, "gguf_source.json"):  # files save_pretrained does not write (e.g.
        # chat_template.jinja; a GGUF-born model's source file, for export_gguf)
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
        # a GGUF model's base is its converted folder, which mlx_lm.load opens
        "model": str(src) if gguf.find_file(Path(config.path)) is not None else config.path,
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
