"""A checkpoint of a GGUF-born run, back to a GGUF file for llama.cpp and Ollama:

    python -m grpo_tui.worker.engine.models.export_gguf runs/smollm2-arith/final smollm2-arith.gguf [--dtype f16|f32]

The checkpoint is a full fine-tune (``model.safetensors``) or LoRA adapters (fused into their base
first); quantized weights are dequantized. The tensors go back to llama.cpp's names and, for the
llama family, its Q/K row order; the metadata is the source GGUF file's own (architecture keys,
tokenizer, chat template), so llama.cpp tokenizes exactly as before. The source file is the one the
run converted (``gguf_source.json`` in the checkpoint or the adapters' base folder) unless
``--source`` names it. llama.cpp's ``llama-quantize`` makes a Q4/Q8 file of the result.

``mlx_lm.fuse --export-gguf`` is not used: it writes a SentencePiece (``llama``) vocabulary with no
merges even for byte-level BPE models such as SmolLM, which llama.cpp then tokenizes wrongly.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten

from grpo_tui.protocol.outcome import Mistake
from grpo_tui.worker.engine.models import gguf

SOURCE_NOTE = "gguf_source.json"
FILE_TYPES = {"f32": 0, "f16": 1}  # llama.cpp's LLAMA_FTYPE_ALL_F32 / MOSTLY_F16


def source_of(checkpoint: Path) -> Path:
    """The GGUF file the run started from."""
    for folder in (checkpoint, _adapter_base(checkpoint)):
        if folder is not None and (folder / SOURCE_NOTE).exists():
            return Path(json.loads((folder / SOURCE_NOTE).read_text())["file"])
    raise Mistake("model", f"{str(checkpoint)!r} does not come from a GGUF file (no {SOURCE_NOTE}); name the "
                           "original GGUF file with --source")


def _adapter_base(checkpoint: Path) -> Path | None:
    config = checkpoint / "adapter_config.json"
    return Path(json.loads(config.read_text())["model"]) if config.exists() else None


def load_float(checkpoint: Path) -> tuple[nn.Module, dict[str, Any]]:
    """The checkpoint's model with LoRA fused and every weight dequantized, and its config."""
    from mlx_lm import load as mlx_load
    from mlx_lm.utils import dequantize_model

    base = _adapter_base(checkpoint)
    if base is not None:
        model, _ = mlx_load(str(base), adapter_path=str(checkpoint))
        fused = [(n, m.fuse(dequantize=True)) for n, m in model.named_modules() if hasattr(m, "fuse")]
        if fused:
            from mlx.utils import tree_unflatten

            model.update_modules(tree_unflatten(fused))
        config = json.loads((base / "config.json").read_text())
    else:
        model, _ = mlx_load(str(checkpoint))
        config = json.loads((checkpoint / "config.json").read_text())
    model = dequantize_model(model)
    config.pop("quantization", None)
    config.pop("quantization_config", None)
    return model, config


def gguf_tensors(model: nn.Module, config: dict[str, Any], dtype: str) -> dict[str, mx.array]:
    """mlx-lm's weights under llama.cpp's names, Q/K permuted back for the llama family; norms stay
    float32 as llama.cpp keeps them."""
    to_gguf = {v: k for k, v in gguf.LAYER_NAMES.items()}
    top = {v: k for k, v in gguf.TOP_NAMES.items()}
    out: dict[str, mx.array] = {}
    for name, value in tree_flatten(model.parameters()):
        module, _, kind = name.rpartition(".")
        if module in top:
            new = f"{top[module]}.{kind}"
        else:
            _, _, layer, rest = module.split(".", 3)
            new = f"blk.{layer}.{to_gguf[rest]}.{kind}"
        if config["model_type"] in gguf.PERMUTED and module.endswith(("self_attn.q_proj", "self_attn.k_proj")):
            heads = config["num_attention_heads"] if module.endswith("q_proj") else config["num_key_value_heads"]
            value = permute(value, heads)
        keep32 = value.ndim == 1 or dtype == "f32"
        out[new] = value.astype(mx.float32 if keep32 else mx.float16)
    return out


def permute(w: mx.array, n_heads: int) -> mx.array:
    """llama.cpp's ``LlamaModel.permute`` (the inverse of ``gguf.unpermute``)."""
    rows = w.shape[0]
    return w.reshape(n_heads, 2, rows // n_heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def export(checkpoint: Path, out: Path, dtype: str = "f16", source: Path | None = None) -> Path:
    checkpoint = Path(checkpoint)
    source = Path(source) if source is not None else source_of(checkpoint)
    if not source.exists():
        raise Mistake("model", f"the run's GGUF file {str(source)!r} is gone; name a copy with --source")
    model, config = load_float(checkpoint)
    tensors = gguf_tensors(model, config, dtype)
    _, metadata = mx.load(str(source), return_metadata=True)
    metadata = dict(metadata)
    metadata["general.file_type"] = mx.array(FILE_TYPES[dtype], dtype=mx.uint32)
    metadata.pop("general.quantization_version", None)
    out.parent.mkdir(parents=True, exist_ok=True)
    mx.save_gguf(str(out), tensors, metadata)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m grpo_tui.worker.engine.models.export_gguf", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkpoint", type=Path, help="a checkpoint folder of a GGUF-born run (e.g. runs/x/final)")
    parser.add_argument("out", type=Path, help="the GGUF file to write")
    parser.add_argument("--dtype", choices=sorted(FILE_TYPES), default="f16", help="weight type (default f16)")
    parser.add_argument("--source", type=Path, default=None, help="the GGUF file the run started from")
    args = parser.parse_args(argv)
    try:
        path = export(args.checkpoint, args.out, args.dtype, args.source)
    except Mistake as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
