"""``GRPOConfig``: TRL's training arguments, converted to and from grpo-tui's TOML config.

The TOML config (``protocol/config.py``) is the single source of truth: ``GRPOConfig`` is a view of
it under TRL's names. It has every field of TRL 1.16's
``GRPOConfig`` and of transformers' ``TrainingArguments``, declared with their fates in
``api/trl_fields.py``; this module converts them.

Unset fields take TRL's defaults (``GRPOConfig()``); a config read with ``from_toml`` keeps the
file's and grpo-tui's. The table in docs/config.md ("TRL names") is generated from these
declarations (``trl_table``).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import difflib
import functools
import json
import math
import tomllib
import typing
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import msgspec

from grpo_tui.common.tomlout import dumps
from grpo_tui.errors import TrainingError
from grpo_tui.protocol.config import Config, ConfigError, apply_override
from grpo_tui.protocol.config_errors import explain
from grpo_tui.protocol.recipes import RECIPES
from grpo_tui.trl_fields import (ADAMW, ADAMW_LIKE, DATALOADER, GENERATION_KWARGS, MISSING, MODEL_INIT_IGNORED,
                                  NOT_YET, TRLFields, toml_default)

@dataclasses.dataclass
class GRPOConfig(TRLFields):
    """Training arguments under TRL's names, for ``GRPOTrainer(args=...)``.

    Every field of TRL 1.16's ``GRPOConfig`` (and of transformers' ``TrainingArguments``) is here
    with TRL's default; each is mapped onto grpo-tui's TOML config, accepted and ignored with a
    warning line per run (``use_vllm``, ``deepspeed``, ``push_to_hub``, ...), or refused in one
    sentence where ignoring it would train something else (docs/config.md, "TRL names", lists
    every field's fate). ``from_toml`` reads a config file (its unset keys keep grpo-tui's
    defaults), ``to_toml`` writes one; anything with no TRL name (``[eval]``'s ``limit``,
    ``[model.lora]``'s ``layers``, the memory switches, ...) travels in ``extra``, nested as in the
    file::

        GRPOConfig(learning_rate=5e-5, num_generations=8, max_completion_length=24, max_steps=200,
                   report_to=["tensorboard"], extra={"eval": {"limit": 50}})

    Values are checked as the TOML file's are: ``GRPOConfig(beta=-1)`` raises ``TrainingError``
    (a ``ValueError``) naming ``beta``. Fields set after construction count as set.
    """

    def __post_init__(self) -> None:
        if isinstance(self.scale_rewards, bool):  # TRL's own spelling, converted as TRL converts it
            self.scale_rewards = "group" if self.scale_rewards else "none"
        self.__dict__.setdefault("_given", set())
        self.__dict__.setdefault("_toml_defaults", False)
        self.__dict__["_ready"] = True
        self.validate()

    def __setattr__(self, name: str, value: Any) -> None:
        if self.__dict__.get("_ready") and not name.startswith("_"):
            if name not in _FIELDS:
                close = difflib.get_close_matches(name, _FIELDS, n=1)
                hint = f" (did you mean {close[0]}?)" if close else ""
                raise AttributeError(f"GRPOConfig has no field {name!r}{hint}: it would be ignored")
            if name == "scale_rewards" and isinstance(value, bool):
                value = "group" if value else "none"
            self.__dict__["_given"].add(name)
        super().__setattr__(name, value)

    # ------------------------------------------------------------ what TRL scripts call

    @property
    def world_size(self) -> int:
        return 1

    @property
    def process_index(self) -> int:
        return 0

    @property
    def local_process_index(self) -> int:
        return 0

    @property
    def should_log(self) -> bool:
        return True

    @property
    def should_save(self) -> bool:
        return True

    @contextlib.contextmanager
    def main_process_first(self, local: bool = True, desc: str = "work") -> Iterator[None]:
        """TRL scripts wrap dataset preparation in it; this process is the only one."""
        yield

    def to_json_string(self) -> str:
        values = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "extra"}
        return json.dumps(values, indent=2, sort_keys=True, default=str) + "\n"

    def given(self) -> set[str]:
        """The fields set by the caller (at construction, afterwards, or by ``from_toml``'s file)."""
        return set(self.__dict__["_given"])

    def _set(self, name: str) -> bool:
        """Whether ``name`` decides the run: set by the caller, or unset with TRL's default taking
        effect (a ``GRPOConfig()``, not one read from a TOML file)."""
        return name in self.__dict__["_given"] or not self.__dict__["_toml_defaults"]

    # ------------------------------------------------------------ conversion

    @classmethod
    def from_toml(cls, path: str | Path, overrides: Sequence[str] = ()) -> "GRPOConfig":
        """Read a config file (``overrides``: ``--set`` items such as ``"grpo.beta=0.04"``).

        The file is checked as ``grpo-tui check`` checks it; relative paths in it are made absolute
        (against the file's folder), so the config works from any working directory."""
        from grpo_tui.protocol.config import load_config

        config = load_config(path, overrides=overrides)  # raises ConfigError naming the key
        raw = tomllib.loads(Path(path).read_text(encoding="utf-8"))
        for item in overrides:
            apply_override(raw, item, str(path))
        _absolute_paths(raw, config)
        return cls.from_dict(raw)

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> "GRPOConfig":
        """From a TOML document as a dict (what ``tomllib.loads`` returns); the keys it leaves out
        keep grpo-tui's defaults, as in a TOML run."""
        rest = copy.deepcopy(raw)
        values: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            toml = f.metadata.get("toml")
            if toml is None:
                continue
            *tables, name = toml.split(".")
            node = rest
            for table in tables:
                node = node.get(table) if isinstance(node, dict) else None  # type: ignore[assignment]
            if isinstance(node, dict) and name in node:
                values[f.name] = node.pop(name)
        if values.get("save_total_limit") == 0:
            values["save_total_limit"] = None
        weights = [r.get("weight", 1.0) for r in rest.get("rewards", []) if isinstance(r, dict)]
        if any(w != 1.0 for w in weights):
            values["reward_weights"] = weights
            for r in rest["rewards"]:
                r.pop("weight", None)
        self = cls.__new__(cls)
        self.__dict__.update(_given=set(values), _toml_defaults=True)
        defaults = {}
        for f in dataclasses.fields(cls):  # the unset fields read as grpo-tui's defaults
            toml = f.metadata.get("toml")
            if f.name not in values and toml is not None and (here := toml_default(toml)) is not MISSING:
                defaults[f.name] = None if f.name == "save_total_limit" and here == 0 else here
        _generated_init(self, **{**defaults, **values}, extra=_prune(rest))
        return self

    def to_dict(self) -> dict[str, Any]:
        """The TOML document as a dict: ``extra``, with every field that decides the run set over it."""
        raw = copy.deepcopy(self.extra)
        recipe = raw.get("grpo", {}).get("recipe") if isinstance(raw.get("grpo"), dict) else None
        recipe_keys = set(RECIPES.get(recipe, {})) if isinstance(recipe, str) else set()
        given = self.__dict__["_given"]
        self._check_refused()
        for f in dataclasses.fields(self):
            toml = f.metadata.get("toml")
            if toml is None or f.metadata.get("fate") != "mapped" or not self._set(f.name):
                continue
            value = getattr(self, f.name)
            if f.name not in given:
                here = toml_default(toml)
                if _has(raw, toml) or toml in recipe_keys or _same(_toml_value(f.name, value), here):
                    continue  # extra (or its recipe) says it, or TRL's default is ours: the file leaves it out
            if f.name == "save_total_limit" and value is None:
                value = 0  # TRL's None (keep all) is 0 here
            if value is None:
                continue  # TRL's None: off, or grpo-tui's own default
            _put(raw, toml, _toml_value(f.name, value))
        _convert_own(self, raw)
        return _prune(raw)

    def evaluates_while_training(self) -> bool:
        """False when ``eval_strategy="no"`` was given: TRL then evaluates only in ``evaluate()``."""
        return not ("eval_strategy" in self.__dict__["_given"] and _text(self.eval_strategy) == "no")

    def _optimizer_steps_per_generation(self) -> int:
        """TRL's ``steps_per_generation`` (or ``generation_batch_size``) as the run's
        ``training.steps_per_generation``: the optimizer steps one generation feeds. TRL counts
        micro-steps of ``per_device_train_batch_size`` completions; the worker's steps are whole
        optimizer steps, so the generation must span whole ones (a divisor of
        ``gradient_accumulation_steps`` samples every micro-batch of a step with the same policy:
        one generation per step)."""
        if self.generation_batch_size is not None and self.steps_per_generation is not None:
            raise TrainingError("generation_batch_size, steps_per_generation: give one of them (as TRL)")
        micro_steps = self.steps_per_generation
        if self.generation_batch_size is not None:
            if self.generation_batch_size % self.per_device_train_batch_size:
                raise TrainingError(
                    f"generation_batch_size: {self.generation_batch_size} must be a multiple of "
                    f"per_device_train_batch_size ({self.per_device_train_batch_size}), as in TRL")
            micro_steps = self.generation_batch_size // self.per_device_train_batch_size
        accumulation = self.gradient_accumulation_steps
        if micro_steps is None or accumulation % micro_steps == 0:
            return 1
        if micro_steps % accumulation:
            name = "steps_per_generation" if self.steps_per_generation is not None else "generation_batch_size"
            raise TrainingError(
                f"{name}: a generation of {micro_steps} micro-steps of per_device_train_batch_size completions ends inside "
                f"an optimizer step of gradient_accumulation_steps = {accumulation}; give a multiple of "
                f"{accumulation} (one generation for whole optimizer steps) or a divisor of it")
        return micro_steps // accumulation

    def _check_refused(self) -> None:
        for f in dataclasses.fields(self):
            if f.metadata.get("fate") != "refused":
                continue
            value = getattr(self, f.name)
            unset_default = f.name not in self.__dict__["_given"] and _same(value, f.metadata["trl_default"])
            if not _same(value, f.metadata["ours"]) and not unset_default:
                raise TrainingError(f"{f.name}={getattr(self, f.name)!r}: {f.metadata['note']}")
        if self.loss_type in ("cispo", "sapo", "luspo", "vespo"):
            from grpo_tui.protocol.config import GrpoConfig

            if self.loss_type not in typing.get_args(typing.get_type_hints(GrpoConfig)["loss_type"]):
                raise TrainingError(f"loss_type={self.loss_type!r}: {NOT_YET}")

    def warnings(self) -> list[str]:
        """One line for each ignored field set to something other than TRL's default (and each
        ignored key of ``model_init_kwargs``): what the run prints once."""
        lines = []
        for f in dataclasses.fields(self):
            if f.metadata.get("fate") == "ignored" and not _same(getattr(self, f.name), f.metadata["trl_default"]):
                lines.append(f"{f.name}={getattr(self, f.name)!r} is ignored: {f.metadata['note']}")
        for key in _init_kwargs(self.model_init_kwargs):
            if key in MODEL_INIT_IGNORED:
                lines.append(f"model_init_kwargs[{key!r}] is ignored: {MODEL_INIT_IGNORED[key]}")
            elif key not in ("dtype", "torch_dtype", "quantization_config"):
                lines.append(f"model_init_kwargs[{key!r}] is ignored: the worker loads the model with mlx-lm")
        if self.optim in ADAMW_LIKE:
            lines.append(f"optim={self.optim!r} runs as MLX's float AdamW")
        if _text(self.train_sampling_strategy) == "group_by_length":
            lines.append(f"train_sampling_strategy='group_by_length' is ignored: {DATALOADER}")
        for key in (self.generation_kwargs or {}):
            if key in ("skip_special_tokens", "spaces_between_special_tokens"):
                lines.append(f"generation_kwargs[{key!r}] is ignored: completions are decoded without special tokens")
        return lines

    def to_toml(self, path: str | Path) -> Path:
        """Write the config as a TOML file for ``grpo-tui run`` / ``check`` (``model``, ``data`` and
        ``rewards`` come from ``extra``: ``GRPOTrainer`` fills them in for its own file)."""
        file = Path(path)
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_text(dumps(self.to_dict()), encoding="utf-8")
        return file

    def validate(self, complete: dict[str, Any] | None = None) -> Config:
        """Check every value as the TOML file's are; ``TrainingError`` names the field."""
        raw = complete if complete is not None else self.to_dict()
        raw.setdefault("model", {}).setdefault("path", "model")
        raw.setdefault("data", {}).setdefault("path", "data.jsonl")
        if not raw.get("rewards"):
            raw["rewards"] = [{"name": "accuracy"}] * len(self.reward_weights or [1])
        try:
            return msgspec.convert(raw, Config)
        except msgspec.ValidationError as exc:
            key, message = explain(str(exc), raw, Config)
            raise TrainingError(f"{trl_name(key)}: {message}") from None


_FIELDS = [f.name for f in dataclasses.fields(GRPOConfig)]
_generated_init = GRPOConfig.__init__


@functools.wraps(_generated_init)
def _init_noting_given(self: GRPOConfig, *args: Any, **kwargs: Any) -> None:
    self.__dict__.update(_given=set(_FIELDS[: len(args)]) | (set(kwargs) - {"extra"}), _toml_defaults=False)
    _generated_init(self, *args, **kwargs)


setattr(GRPOConfig, "__init__", _init_noting_given)  # which fields the caller gave: TRL's defaults for the rest


def _convert_own(config: GRPOConfig, raw: dict[str, Any]) -> None:
    """The fields with no single TOML key (``_own``), onto ``raw``."""
    training = raw.setdefault("training", {})
    given = config.given()
    if config._set("per_device_train_batch_size") and not (
        "per_device_train_batch_size" not in given and "batch_size" in training
    ):
        completions = config.per_device_train_batch_size * config.gradient_accumulation_steps
        if completions % config.num_generations:
            raise TrainingError(
                f"per_device_train_batch_size: {config.per_device_train_batch_size} × gradient_accumulation_steps "
                f"{config.gradient_accumulation_steps} completions must be a multiple of num_generations "
                f"({config.num_generations})"
            )
        training["batch_size"] = completions // config.num_generations
        if training["batch_size"] % config.gradient_accumulation_steps:
            # TRL's micro-batches may split a group; the worker's hold whole groups: the same
            # completions in one optimizer step, over fewer micro-batches of TRL's forward size.
            training["gradient_accumulation_steps"] = math.gcd(training["batch_size"], config.gradient_accumulation_steps)
            training.setdefault("logprob_batch_size", config.per_device_train_batch_size)
    if (reuse := config._optimizer_steps_per_generation()) > 1:
        training["steps_per_generation"] = reuse
    if config.reward_weights is not None and raw.get("rewards"):
        rewards = raw["rewards"]
        if len(rewards) != len(config.reward_weights):
            raise TrainingError(
                f"reward_weights: {len(config.reward_weights)} weights for {len(rewards)} reward functions"
            )
        for table, weight in zip(rewards, config.reward_weights):
            table["weight"] = float(weight)
    dtype = _dtype(config)
    if dtype is not None:
        raw.setdefault("model", {})["dtype"] = dtype
    if config.activation_checkpointing:
        training["gradient_checkpointing"] = True
    if isinstance(config.warmup_steps, float) and 0 < config.warmup_steps < 1:  # transformers 5: a ratio
        training.pop("warmup_steps", None)
        training["warmup_ratio"] = config.warmup_steps
    for key, value in _lr_scheduler_kwargs(config.lr_scheduler_kwargs, config.learning_rate).items():
        training[key] = value
    generation = raw.setdefault("generation", {})
    for key, value in (config.generation_kwargs or {}).items():
        if key in GENERATION_KWARGS:
            generation[GENERATION_KWARGS[key]] = _toml_value(key, value)
        elif key not in ("skip_special_tokens", "spaces_between_special_tokens"):
            raise TrainingError(
                f"generation_kwargs: {key!r} is not supported here; the keys that are: "
                + ", ".join(GENERATION_KWARGS))
    for key, value in (config.chat_template_kwargs or {}).items():
        if key != "enable_thinking":
            raise TrainingError(f"chat_template_kwargs: {key!r} is not supported here; enable_thinking is")
        generation["enable_thinking"] = bool(value)
    _check_choice("optim", config.optim, ADAMW + ADAMW_LIKE, "AdamW is the optimizer here")
    _check_choice("logging_strategy", config.logging_strategy, ("steps",),
                  "give logging_steps, a number of steps")
    if isinstance(config.logging_steps, float) and config.logging_steps < 1:
        raise TrainingError(f"logging_steps: {config.logging_steps} — a ratio of the run is not supported; "
                            "give a number of steps")
    for name in ("save_steps", "eval_steps"):  # TRL's ratio of the run; int() would make eval_steps 0
        value = getattr(config, name)
        if isinstance(value, float) and value < 1:
            raise TrainingError(f"{name}: {value} — a ratio of the run is not supported; give a number of steps")
    checkpoint = raw.setdefault("checkpoint", {})
    strategy = _text(config.save_strategy)
    _check_choice("save_strategy", strategy, ("steps", "no"), "give save_steps, a number of steps")
    if strategy == "no":
        checkpoint["save_every"] = 0
    if config._set("data_seed") and not ("data_seed" not in given and "seed" in raw.get("data", {})):
        seed = config.data_seed if config.data_seed is not None else config.seed
        if seed != toml_default("data.seed") or "data_seed" in given:
            raw.setdefault("data", {})["seed"] = int(seed)
    _check_as_trl(config)
    if _text(config.train_sampling_strategy) == "sequential":
        raw.setdefault("data", {})["shuffle"] = False
    eval_table = _eval_table(config, raw.get("eval"))
    if eval_table is not None:
        raw["eval"] = eval_table

def _check_as_trl(config: GRPOConfig) -> None:
    """What TRL and transformers refuse of the fields that are otherwise ignored here."""
    _check_choice("train_sampling_strategy", config.train_sampling_strategy, ("random", "sequential", "group_by_length"),
                  "give one of transformers' samplers")
    if config.log_completions_hub_repo is not None and not config.log_completions:  # TRL's GRPOConfig raises
        raise TrainingError("log_completions_hub_repo is set, but log_completions is False: enable log_completions "
                            "or unset log_completions_hub_repo (as TRL)")


def _eval_table(config: GRPOConfig, given_table: Any) -> dict[str, Any] | None:
    """``[eval]`` from eval_strategy and its companions (None: leave it as it is)."""
    strategy = _text(config.eval_strategy)
    _check_choice("eval_strategy", strategy, ("no", "steps"), "give eval_strategy=\"steps\" and eval_steps")
    table = dict(given_table) if isinstance(given_table, dict) else None
    if config.num_generations_eval is not None:
        table = {**(table or {}), "num_samples": int(config.num_generations_eval), "greedy": False}
    if strategy == "steps":
        table = dict(table or {})
        table["every"] = int(config.eval_steps if config.eval_steps is not None else config.logging_steps)
        table["at_start"] = bool(config.eval_on_start)
        table.setdefault("at_end", False)
    elif "eval_on_start" in config.given() and table is not None:
        table["at_start"] = bool(config.eval_on_start)
    return table


def _dtype(config: GRPOConfig) -> str | None:
    if config.bf16 and config.fp16:
        raise TrainingError("bf16, fp16: give one of them")
    kwargs = _init_kwargs(config.model_init_kwargs)
    dtype = kwargs.get("dtype", kwargs.get("torch_dtype"))
    if dtype is not None and str(dtype).removeprefix("torch.") != "auto":
        name = str(dtype).removeprefix("torch.")
        if name not in ("float32", "bfloat16", "float16"):
            raise TrainingError(f"model_init_kwargs: dtype {name!r} is not one of float32, bfloat16, float16, auto")
        return name
    if "quantization_config" in kwargs:
        raise TrainingError("model_init_kwargs: quantization_config is not supported; give a quantized "
                            "mlx-community model (LoRA on it is QLoRA)")
    return "bfloat16" if config.bf16 else "float16" if config.fp16 else None


def _init_kwargs(value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if isinstance(value, str):  # TRL's CLI passes it as JSON
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            raise TrainingError(f"model_init_kwargs: {value!r} is not a JSON object") from None
    if not isinstance(value, dict):
        raise TrainingError(f"model_init_kwargs: {type(value).__name__} is not a dict")
    return value


def _lr_scheduler_kwargs(value: Any, learning_rate: float) -> dict[str, Any]:
    kwargs = _init_kwargs(value) if value is not None else {}
    out: dict[str, Any] = {}
    for key, item in kwargs.items():
        if key == "min_lr_rate":
            out["min_lr_rate"] = float(item)
        elif key == "min_lr":
            out["min_lr_rate"] = float(item) / learning_rate
        else:
            raise TrainingError(f"lr_scheduler_kwargs: {key!r} is not supported here; min_lr_rate and min_lr are")
    return out


def _text(value: Any) -> Any:
    """transformers' enums (``IntervalStrategy.STEPS``) as their strings."""
    return getattr(value, "value", value)


def _check_choice(name: str, value: Any, allowed: Sequence[str], what_to_do: str) -> None:
    if _text(value) not in allowed:
        raise TrainingError(f"{name}={_text(value)!r} is not supported here ({', '.join(allowed)}); {what_to_do}")


def _same(a: Any, b: Any) -> bool:
    """Equal as values, with True and 1 (False and 0) told apart."""
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001 — an object without a plain ==
        return a is b


def _has(raw: dict[str, Any], key: str) -> bool:
    *tables, name = key.split(".")
    node: Any = raw
    for table in tables:
        node = node.get(table) if isinstance(node, dict) else None
    return isinstance(node, dict) and name in node


def _put(raw: dict[str, Any], key: str, value: Any) -> None:
    *tables, name = key.split(".")
    node = raw
    for table in tables:
        node = node.setdefault(table, {})
    node[name] = value


def _toml_value(name: str, value: Any) -> Any:
    value = _text(value)
    if name == "report_to":
        if value is None or value == "none":
            return []
        if value == "all":
            raise TrainingError('report_to: "all" is not supported here; name the trackers, e.g. ["wandb"]')
        return [value] if isinstance(value, str) else list(value)
    if name == "max_steps" and isinstance(value, int) and value < 0:
        return 0
    if name == "min_p" and value is None:
        return 0.0
    if name == "num_train_epochs" and isinstance(value, float):
        if not value.is_integer() or math.isinf(value):
            raise TrainingError(f"num_train_epochs: {value} — grpo-tui trains whole epochs; give an integer")
        return int(value)
    if name == "warmup_steps" and isinstance(value, float) and value < 1:
        return 0  # a ratio: to_dict's caller puts it into warmup_ratio (_convert_own)
    if name in ("logging_steps", "save_steps", "eval_steps", "warmup_steps") and isinstance(value, float) \
            and value.is_integer():
        return int(value)
    if isinstance(value, Path):
        return str(value)
    return value


def _prune(raw: dict[str, Any]) -> dict[str, Any]:
    """Drop tables left empty."""
    return {k: v for k, v in raw.items() if not (isinstance(v, dict) and not v)}


def _absolute_paths(raw: dict[str, Any], config: Config) -> None:
    """Copy the resolved (absolute) paths into the raw document, where the file gave them."""
    resolved = config.to_dict()
    for section, key in (("model", "path"), ("data", "path"), ("data", "eval_path"), ("data", "tools"),
                         ("checkpoint", "output_dir"), ("distributed", "hostfile")):
        if key in raw.get(section, {}) or (section, key) == ("checkpoint", "output_dir"):
            value = resolved.get(section, {}).get(key)
            if value is not None:
                raw.setdefault(section, {})[key] = value
    for kind in ("rewards", "tools"):
        for table, done in zip(raw.get(kind, []), resolved.get(kind, [])):
            if "function" in table:
                table["function"] = done["function"]
    resume = resolved["checkpoint"]["resume"]
    if isinstance(resume, str) and resume != "latest":
        raw["checkpoint"]["resume"] = resume


def trl_name(toml_key: str) -> str:
    """The GRPOConfig field for a TOML key path (itself when none stands for it); an item's index
    stays (``logging.report_to[0]`` is ``report_to[0]``)."""
    key, bracket, index = toml_key.partition("[")
    for f in dataclasses.fields(GRPOConfig):
        if f.metadata.get("toml") == key:
            return f.name + bracket + index
    return toml_key


def trl_fates() -> dict[str, str]:
    """Every TRL field's fate: ``mapped``, ``ignored``, ``refused`` or ``inert``."""
    return {f.name: f.metadata["fate"] for f in dataclasses.fields(GRPOConfig) if "fate" in f.metadata}


def trl_table() -> str:
    """The docs/config.md table: TRL name, fate, TOML key, default here, default in TRL, note."""

    def show(value: Any) -> str:
        return "none" if value is None else f"`{json.dumps(value)}`"  # as TOML spells it

    lines = ["| TRL name | fate | TOML key | default here | default in TRL | |", "|---|---|---|---|---|---|"]
    for f in dataclasses.fields(GRPOConfig):
        if "fate" not in f.metadata:
            continue
        toml = f.metadata["toml"]
        here = toml_default(toml) if toml else None
        here_text = "—" if toml is None else "(newer grpo-tui)" if here is MISSING else show(here)
        key = f"`{toml}`" if toml else "—"
        note = f.metadata["note"].replace("|", "\\|")
        lines.append(f"| `{f.name}` | {f.metadata['fate']} | {key} | {here_text} | "
                     f"{show(f.metadata['trl_default'])} | {note} |")
    return "\n".join(lines) + "\n"


__all__ = ["GRPOConfig", "ConfigError", "TrainingError", "trl_fates", "trl_name", "trl_table"]
