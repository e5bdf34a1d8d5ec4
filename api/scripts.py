"""What TRL's training scripts import besides the trainer (``trl/scripts/grpo.py``'s skeleton):
``ScriptArguments``, ``ModelConfig``, ``DatasetConfig``, ``DatasetMixtureConfig``, ``TrlParser``,
``get_peft_config``, ``get_quantization_config``, ``get_kbit_device_map``, ``get_dataset``, with
TRL 1.16's fields and defaults. ``TrlParser`` is transformers' ``HfArgumentParser`` with TRL's
``--config file.yaml`` (its ``env`` table sets environment variables)."""

from __future__ import annotations

import argparse
import copy
import dataclasses
import os
import sys
import types
import typing
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from grpo_tui.errors import TrainingError


@dataclass
class ScriptArguments:
    """Arguments common to TRL's scripts (the dataset to load and its splits)."""

    dataset_name: str | None = None
    dataset_config: str | None = None
    dataset_train_split: str = "train"
    dataset_test_split: str = "test"
    dataset_streaming: bool = False
    ignore_bias_buffers: bool = False


@dataclass
class ModelConfig:
    """TRL's model arguments: the model, and the LoRA that ``get_peft_config`` makes of them."""

    model_name_or_path: str | None = None
    model_revision: str = "main"
    dtype: str | None = "float32"
    attn_implementation: str | None = None
    use_peft: bool = False
    lora_r: int = 16
    lora_alpha: int = 32
    lora_dropout: float = 0.05
    lora_target_modules: list[str] | None = None
    lora_target_parameters: list[str] | None = None
    lora_modules_to_save: list[str] | None = None
    lora_task_type: str = "CAUSAL_LM"
    use_rslora: bool = False
    use_dora: bool = False
    load_in_8bit: bool = False
    load_in_4bit: bool = False
    bnb_4bit_quant_type: str = "nf4"
    use_bnb_nested_quant: bool = False
    bnb_4bit_quant_storage: str | None = None

    def __post_init__(self) -> None:
        if self.load_in_8bit and self.load_in_4bit:
            raise ValueError("You can't use 8 bit and 4 bit precision at the same time")
        if isinstance(self.lora_target_modules, list) and len(self.lora_target_modules) == 1:
            self.lora_target_modules = self.lora_target_modules[0]  # type: ignore[assignment]  # TRL's: one name, a regex


@dataclass
class DatasetConfig:
    """One dataset of a mixture, as ``datasets.load_dataset`` takes it."""

    path: str
    name: str | None = None
    data_dir: str | None = None
    data_files: str | list[str] | dict[str, str] | None = None
    split: str = "train"
    columns: list[str] | None = None
    fraction: float | None = None


@dataclass
class DatasetMixtureConfig:
    """TRL's ``datasets:`` list (in a ``--config`` YAML file) and how to split it."""

    datasets: list[DatasetConfig] = field(default_factory=list)
    streaming: bool = False
    test_split_size: float | None = None

    def __post_init__(self) -> None:
        self.datasets = [DatasetConfig(**d) if isinstance(d, dict) else d for d in self.datasets]


def get_peft_config(model_args: ModelConfig) -> dict[str, Any] | None:
    """LoRA from the model arguments (``--use_peft``), as ``peft.LoraConfig``'s fields: what
    ``GRPOTrainer(peft_config=...)`` takes (a ``peft.LoraConfig`` when PEFT is installed)."""
    if not model_args.use_peft:
        return None
    fields = dict(task_type=model_args.lora_task_type, r=model_args.lora_r, target_modules=model_args.lora_target_modules,
                  target_parameters=model_args.lora_target_parameters, lora_alpha=model_args.lora_alpha,
                  lora_dropout=model_args.lora_dropout, bias="none", use_rslora=model_args.use_rslora,
                  use_dora=model_args.use_dora, modules_to_save=model_args.lora_modules_to_save)
    try:
        from peft import LoraConfig  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        return fields
    return LoraConfig(**fields)  # type: ignore[no-any-return,unused-ignore]


def get_quantization_config(model_args: ModelConfig) -> None:
    """None: MLX loads quantized models as they are stored (bitsandbytes' 4- and 8-bit are refused)."""
    if model_args.load_in_4bit or model_args.load_in_8bit:
        raise TrainingError("load_in_4bit / load_in_8bit: bitsandbytes does not run here; give a quantized "
                            "mlx-community model (LoRA on it is QLoRA)")
    return None


def get_kbit_device_map() -> None:
    return None  # MLX places the model


def get_dataset(mixture_config: DatasetMixtureConfig) -> Any:
    """The mixture's datasets loaded, their columns selected, concatenated; split into train and
    test when ``test_split_size`` is set (a ``datasets.DatasetDict``)."""
    import datasets

    parts = []
    for config in mixture_config.datasets:
        part = datasets.load_dataset(config.path, name=config.name, data_dir=config.data_dir,
                                     data_files=config.data_files, split=config.split,
                                     streaming=mixture_config.streaming)
        parts.append(part.select_columns(config.columns) if config.columns else part)
    if not parts:
        raise ValueError("No datasets were loaded from the mixture configuration")
    combined = datasets.concatenate_datasets(parts)
    if mixture_config.test_split_size is not None:
        return combined.train_test_split(test_size=mixture_config.test_split_size)
    return datasets.DatasetDict({"train": combined})


def _parser_base() -> Any:
    try:
        from transformers import HfArgumentParser
    except ImportError as exc:  # pragma: no cover - mlx-lm brings transformers
        raise TrainingError("TrlParser needs transformers (pip install transformers)") from exc
    return HfArgumentParser


class TrlParser(_parser_base()):  # type: ignore[misc,unused-ignore]
    """transformers' ``HfArgumentParser`` for dataclasses (``GRPOConfig`` included), with TRL's
    ``parse_args_and_config``: ``--config file.yaml`` sets defaults (and ``env:`` variables),
    the command line wins over it."""

    def __init__(self, dataclass_types: Any = None, **kwargs: Any) -> None:
        types = [] if dataclass_types is None else list(dataclass_types) if isinstance(dataclass_types, Iterable) \
            else [dataclass_types]
        for tp in types:
            if "config" in tp.__dataclass_fields__:
                raise ValueError(f"Dataclass {tp.__name__} has a field named 'config'. This field is reserved for the "
                                 "config file path and should not be used in the dataclass.")
        super().__init__(dataclass_types=types, **kwargs)

    @staticmethod
    def _parse_dataclass_field(parser: argparse.ArgumentParser, field: dataclasses.Field[Any]) -> None:
        """GRPOConfig's fields carry their fate in their metadata: the parser gets a copy with only
        the help text (and one type where a union has several, as TRL's own declarations do)."""
        own = copy.copy(field)
        if set(field.metadata) - {"help", "aliases", "choices"}:
            own.metadata = types.MappingProxyType({"help": field.metadata.get("note", "")})
            args = [a for a in typing.get_args(field.type) if a is not type(None)]
            if args == [bool]:
                own.type = bool  # a bare --bf16 is True, as with transformers' own bool fields
            elif len(args) > 1:
                own.type = (args[0] if args[0] in (int, float, bool) and str not in args else str) | None
        _parser_base()._parse_dataclass_field(parser, own)

    def parse_args_and_config(self, args: Iterable[str] | None = None, return_remaining_strings: bool = False,
                              fail_with_unknown_args: bool = True,
                              separate_remaining_strings: bool = False) -> tuple[Any, ...]:
        args = list(args) if args is not None else sys.argv[1:]
        remaining: list[str] = []
        if "--config" in args:
            import yaml  # type: ignore[import-untyped,unused-ignore]

            at = args.index("--config")
            args.pop(at)
            with open(args.pop(at), encoding="utf-8") as f:
                config = yaml.safe_load(f) or {}
            env = config.pop("env", {})
            if not isinstance(env, dict):
                raise ValueError("`env` field should be a dict in the YAML file.")
            for key, value in env.items():
                os.environ[key] = str(value)
            remaining = self.set_defaults_with_config(**config)
        output = self.parse_args_into_dataclasses(args=args, return_remaining_strings=return_remaining_strings)
        if return_remaining_strings:
            if separate_remaining_strings:
                return output[:-1] + (remaining, output[-1])
            return output[:-1] + (remaining + list(output[-1]),)
        if fail_with_unknown_args and remaining:
            raise ValueError(f"Unknown arguments from config file: {remaining}. Please remove them, add them to the "
                             "dataclass, or set `fail_with_unknown_args=False`.")
        return output

    def parse_args_into_dataclasses(self, args: Iterable[str] | None = None, return_remaining_strings: bool = False,
                                    **_: Any) -> tuple[Any, ...]:
        """As transformers', except that a ``GRPOConfig`` gets only the fields that differ from TRL's
        defaults (as a script that names some): the rest count as unset."""
        from grpo_tui.config import GRPOConfig

        namespace, remaining = self.parse_known_args(args=list(args) if args is not None else sys.argv[1:])
        outputs: list[Any] = []
        for tp in self.dataclass_types:
            keys = {f.name for f in dataclasses.fields(tp) if f.init}
            inputs = {k: v for k, v in vars(namespace).items() if k in keys}
            for key in keys & set(vars(namespace)):
                delattr(namespace, key)
            if isinstance(tp, type) and issubclass(tp, GRPOConfig):
                defaults = {f.name: f.metadata.get("trl_default") for f in dataclasses.fields(tp)}
                inputs = {k: v for k, v in inputs.items() if k == "extra" and v or k != "extra" and v != defaults[k]}
            outputs.append(tp(**inputs))
        if vars(namespace):
            outputs.append(namespace)
        if return_remaining_strings:
            return (*outputs, remaining)
        if remaining:
            raise ValueError(f"Some specified arguments are not used by the HfArgumentParser: {remaining}")
        return tuple(outputs)

    def set_defaults_with_config(self, **kwargs: Any) -> list[str]:
        used: set[str] = set()

        def apply(parser: argparse.ArgumentParser) -> None:
            for action in parser._actions:
                if isinstance(action, argparse._SubParsersAction):
                    for sub in action.choices.values():
                        apply(sub)
                elif action.dest in kwargs:
                    action.default, action.required = kwargs[action.dest], False
                    used.add(action.dest)

        apply(self)
        return [item for key, value in kwargs.items() if key not in used for item in (f"--{key}", str(value))]


__all__ = ["DatasetConfig", "DatasetMixtureConfig", "ModelConfig", "ScriptArguments", "TrlParser", "get_dataset",
           "get_kbit_device_map", "get_peft_config", "get_quantization_config"]
