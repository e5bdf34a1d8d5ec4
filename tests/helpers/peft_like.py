"""A stand-in for ``peft.LoraConfig`` (PEFT needs PyTorch, which this project never installs): the
same field names and defaults (peft 0.17), which is all ``GRPOTrainer(peft_config=...)`` reads."""

from __future__ import annotations

import dataclasses
from typing import Any


@dataclasses.dataclass
class LoraConfig:
    task_type: str | None = None
    r: int = 8
    target_modules: list[str] | str | None = None
    exclude_modules: list[str] | str | None = None
    lora_alpha: int = 8
    lora_dropout: float = 0.0
    fan_in_fan_out: bool = False
    bias: str = "none"
    use_rslora: bool = False
    modules_to_save: list[str] | None = None
    init_lora_weights: bool | str = True
    layers_to_transform: list[int] | int | None = None
    layers_pattern: list[str] | str | None = None
    rank_pattern: dict[str, Any] = dataclasses.field(default_factory=dict)
    alpha_pattern: dict[str, Any] = dataclasses.field(default_factory=dict)
    use_dora: bool = False

    peft_type: str | None = None

    def __post_init__(self) -> None:
        self.peft_type = "LORA"  # as PEFT does (its PeftType is a str enum)
        if isinstance(self.target_modules, list):  # as PEFT does
            self.target_modules = set(self.target_modules)  # type: ignore[assignment]


@dataclasses.dataclass
class PromptTuningConfig:
    """Another of PEFT's methods, which is not LoRA."""

    task_type: str | None = None
    num_virtual_tokens: int = 20
    peft_type: str | None = None

    def __post_init__(self) -> None:
        self.peft_type = "PROMPT_TUNING"
