"""``[model]`` and its ``[model.lora]`` (docs/config.md)."""

from __future__ import annotations

from typing import Literal

from grpo_tui.protocol.config_base import Section as _Section, invalid as _invalid


class LoraConfig(_Section):
    rank: int = 8
    alpha: float = 16.0
    layers: int = 8  # how many of the last transformer blocks get adapters; -1 = all
    dropout: float = 0.0
    keys: list[str] | None = None  # module names to adapt; mlx-lm's default when omitted

    def __post_init__(self) -> None:
        if self.rank < 1:
            raise _invalid("rank", self.rank, "must be at least 1")
        if self.layers == 0 or self.layers < -1:
            raise _invalid("layers", self.layers, "must be -1 (all) or at least 1")
        if not 0.0 <= self.dropout < 1.0:
            raise _invalid("dropout", self.dropout, "must be in [0, 1)")


class ModelConfig(_Section):
    path: str  # an mlx-lm folder, a GGUF file (or a folder holding one) or a hub id
    lora: LoraConfig | None = None
    dequantize: bool = False  # a quantized model's weights become float (``dtype``) and all train
    dtype: Literal["float32", "bfloat16", "float16"] | None = None  # the float weights' type; None: as stored
