"""``GRPOConfig``: TRL's training arguments, converted to and from grpo-tui's TOML config.

The TOML config (``protocol/config.py``) is the single source of truth: every field here names the
TOML key it stands for, its default is that key's default, and the trainer writes the TOML file the
worker reads. Each field is declared once, with ``_key(toml_key, trl_default)``; the table in
docs/config.md ("TRL names") is generated from these declarations (``trl_table``).
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import tomllib
import typing
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec

from grpo_tui.common.tomlout import dumps
from grpo_tui.protocol.config import Config, ConfigError, apply_override
from grpo_tui.protocol.config_errors import explain

_MISSING = object()


def _toml_default(key: str) -> Any:
    """The default of a TOML key, read from the config's own classes (``_MISSING`` when this
    version of grpo-tui has no such key)."""
    tp: Any = Config
    *tables, name = key.split(".")
    for table in tables:
        hints = typing.get_type_hints(tp)
        if table not in hints:
            return _MISSING
        tp = hints[table]
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        tp = args[0] if args and isinstance(args[0], type) and issubclass(args[0], msgspec.Struct) else tp
    fields = {f.name: f for f in msgspec.structs.fields(tp)}
    if name not in fields:
        return _MISSING
    f = fields[name]
    if f.default is not msgspec.NODEFAULT:
        return f.default
    return f.default_factory() if f.default_factory is not msgspec.NODEFAULT else _MISSING


def _key(toml: str, trl_default: Any, *, note: str = "", unset: bool = False) -> Any:
    """A field standing for the TOML key ``toml`` (``section.key``); its default is that key's
    (None with ``unset``: the key is written only when the field is given)."""
    default = _toml_default(toml)
    meta = {"toml": toml, "trl_default": trl_default, "note": note}
    if default is _MISSING:  # a key a newer grpo-tui has; setting it here is an error that says so
        return dataclasses.field(default=None, metadata={**meta, "missing": True})
    if unset:
        return dataclasses.field(default=None, metadata=meta)
    if isinstance(default, list):
        return dataclasses.field(default_factory=lambda: list(default), metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def _own(trl_default: Any, *, note: str) -> Any:
    """A TRL field converted by hand (``note`` says how)."""
    return dataclasses.field(default=None, metadata={"toml": None, "trl_default": trl_default, "note": note})


@dataclasses.dataclass
class GRPOConfig:
    """Training arguments under TRL's names, for ``GRPOTrainer(args=...)``.

    Every field stands for one key of grpo-tui's TOML config, and its default is that key's default
    (which can differ from TRL's: docs/config.md, "TRL names", lists both). ``from_toml`` reads a
    config file, ``to_toml`` writes one; anything with no TRL name (``[eval]``, ``[model.lora]``,
    the memory switches, ...) travels in ``extra``, nested as in the file::

        GRPOConfig(learning_rate=5e-5, num_generations=8, max_completion_length=24, max_steps=200,
                   report_to=["tensorboard"], extra={"eval": {"every": 50}})

    Values are checked as the TOML file's are: ``GRPOConfig(beta=-1)`` raises ``ValueError``
    naming ``beta``.
    """

    output_dir: str = _key("checkpoint.output_dir", "trainer_output")
    run_name: str | None = _key("name", None)
    # generation
    num_generations: int = _key("grpo.group_size", 8)
    max_completion_length: int = _key("generation.max_completion_length", 256)
    max_prompt_length: int | None = _key("generation.max_prompt_length", 512, note="removed from recent TRL")
    temperature: float = _key("generation.temperature", 1.0)
    top_p: float = _key("generation.top_p", 1.0)
    top_k: int = _key("generation.top_k", 0)
    min_p: float = _key("generation.min_p", None, note="0.0 = off, as TRL's None")
    repetition_penalty: float = _key("generation.repetition_penalty", 1.0)
    max_tool_calling_iterations: int = _key("generation.max_tool_calls", None, note="None = no limit in TRL")
    # the loss
    beta: float = _key("grpo.beta", 0.0)
    epsilon: float = _key("grpo.epsilon", 0.2)
    epsilon_high: float | None = _key("grpo.epsilon_high", None, note="None = epsilon in both")
    loss_type: str = _key("grpo.loss_type", "dapo")
    scale_rewards: str = _key("grpo.scale_rewards", "group")
    num_iterations: int = _key("grpo.num_iterations", 1)
    importance_sampling_level: str = _key("grpo.importance_sampling_level", "token")
    mask_truncated_completions: bool = _key("grpo.mask_truncated_completions", False)
    top_entropy_quantile: float = _key("grpo.top_entropy_quantile", 1.0)
    sync_ref_model: bool = _key("grpo.sync_ref_model", False)
    ref_model_mixup_alpha: float = _key("grpo.ref_model_mixup_alpha", 0.6)
    ref_model_sync_steps: int = _key("grpo.ref_model_sync_steps", 512)
    reward_weights: list[float] | None = _own(None, note="`weight` of each `[[rewards]]` table, in order")
    # optimization
    learning_rate: float = _key("training.learning_rate", 1e-6)
    lr_scheduler_type: str = _key("training.lr_scheduler_type", "linear")
    warmup_ratio: float = _key("training.warmup_ratio", 0.0)
    warmup_steps: int = _key("training.warmup_steps", 0)
    max_steps: int = _key("training.max_steps", -1, note="-1 is taken as 0: train until the epochs end")
    num_train_epochs: int = _key("training.num_epochs", 3.0, note="whole epochs here")
    per_device_train_batch_size: int | None = _own(
        8, note="completions per micro-batch in TRL: `training.batch_size` (prompts per step) = "
        "this × gradient_accumulation_steps ÷ num_generations"
    )
    gradient_accumulation_steps: int = _key("training.gradient_accumulation_steps", 1)
    max_grad_norm: float = _key("training.max_grad_norm", 1.0)
    weight_decay: float = _key("training.weight_decay", 0.0)
    gradient_checkpointing: bool = _key("training.gradient_checkpointing", True)
    seed: int = _key("training.seed", 42)
    shuffle_dataset: bool = _key("data.shuffle", True)
    # checkpoints, evaluation, logging
    save_steps: int = _key("checkpoint.save_every", 500)
    save_total_limit: int | None = _key("checkpoint.keep_last", None, note="None = keep all (0 here)")
    eval_steps: int | None = _key("eval.every", None, note="with an eval_dataset", unset=True)
    logging_steps: int = _key("logging.steps", 10)
    report_to: list[str] | str = _key("logging.report_to", "none", note='"none" = [], a name = [name]')
    log_completions: bool = _key("logging.log_completions", False)
    extra: dict[str, Any] = dataclasses.field(default_factory=dict, metadata={"toml": None})

    def __post_init__(self) -> None:
        self.validate()

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
        """From a TOML document as a dict (what ``tomllib.loads`` returns)."""
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
                values[f.name] = node[name]
                if node[name] != f.default:  # a default the file spells out stays in extra, so a
                    del node[name]  # recipe (grpo.recipe) cannot override it on the way back
        if values.get("save_total_limit") == 0:
            values["save_total_limit"] = None
        weights = [r.get("weight", 1.0) for r in rest.get("rewards", []) if isinstance(r, dict)]
        if any(w != 1.0 for w in weights):
            values["reward_weights"] = weights
            for r in rest["rewards"]:
                r.pop("weight", None)
        return cls(**values, extra=_prune(rest))

    def to_dict(self) -> dict[str, Any]:
        """The TOML document as a dict: ``extra``, with every field set over it."""
        raw = copy.deepcopy(self.extra)
        for f in dataclasses.fields(self):
            toml, value = f.metadata.get("toml"), getattr(self, f.name)
            if f.name == "save_total_limit" and value is None:
                value = 0  # TRL's None (keep all) is 0 here
            if toml is None or value is None or (value == f.default and not isinstance(f.default, list)):
                continue  # TRL's None (off) or the default: the file leaves the key out (a recipe's stays)
            if f.metadata.get("missing"):
                raise ValueError(f"{f.name}: this version of grpo-tui has no {toml} setting")
            node = raw
            *tables, name = toml.split(".")
            for table in tables:
                node = node.setdefault(table, {})
            node[name] = _to_toml_value(f.name, value)
        training = raw.setdefault("training", {})
        if self.per_device_train_batch_size is not None:
            completions = self.per_device_train_batch_size * self.gradient_accumulation_steps
            if completions % self.num_generations:
                raise ValueError(
                    f"per_device_train_batch_size: {self.per_device_train_batch_size} × gradient_accumulation_steps "
                    f"{self.gradient_accumulation_steps} completions must be a multiple of num_generations "
                    f"({self.num_generations})"
                )
            training["batch_size"] = completions // self.num_generations
        if self.reward_weights is not None and raw.get("rewards"):
            rewards = raw["rewards"]
            if len(rewards) != len(self.reward_weights):
                raise ValueError(
                    f"reward_weights: {len(self.reward_weights)} weights for {len(rewards)} reward functions"
                )
            for table, weight in zip(rewards, self.reward_weights):
                table["weight"] = float(weight)
        if "eval" in raw and not isinstance(raw["eval"], dict):
            raise ValueError("extra['eval'] must be a table")
        return _prune(raw)

    def to_toml(self, path: str | Path) -> Path:
        """Write the config as a TOML file for ``grpo-tui run`` / ``check`` (``model``, ``data`` and
        ``rewards`` come from ``extra``: ``GRPOTrainer`` fills them in for its own file)."""
        file = Path(path)
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_text(dumps(self.to_dict()), encoding="utf-8")
        return file

    def validate(self, complete: dict[str, Any] | None = None) -> Config:
        """Check every value as the TOML file's are; ``ValueError`` names the field."""
        raw = complete if complete is not None else self.to_dict()
        raw.setdefault("model", {}).setdefault("path", "model")
        raw.setdefault("data", {}).setdefault("path", "data.jsonl")
        if not raw.get("rewards"):
            raw["rewards"] = [{"name": "accuracy"}] * len(self.reward_weights or [1])
        try:
            return msgspec.convert(raw, Config)
        except msgspec.ValidationError as exc:
            key, message = explain(str(exc), raw, Config)
            raise ValueError(f"{trl_name(key)}: {message}") from None


def _to_toml_value(name: str, value: Any) -> Any:
    if name == "report_to" and isinstance(value, str):
        if value == "all":
            raise ValueError('report_to: "all" is not supported here; name the trackers, e.g. ["wandb"]')
        return [] if value == "none" else [value]
    if name == "max_steps" and isinstance(value, int) and value < 0:
        return 0
    if name == "num_train_epochs" and isinstance(value, float):
        if not value.is_integer() or math.isinf(value):
            raise ValueError(f"num_train_epochs: {value} — grpo-tui trains whole epochs; give an integer")
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
    """The GRPOConfig field for a TOML key path (itself when none stands for it)."""
    for f in dataclasses.fields(GRPOConfig):
        if f.metadata.get("toml") == toml_key:
            return f.name
    return toml_key


def trl_table() -> str:
    """The docs/config.md table: TRL name, TOML key, default here, default in TRL."""

    def show(value: Any) -> str:
        return "none" if value is None else f"`{json.dumps(value)}`"  # as TOML spells it

    lines = ["| TRL name | TOML key | default here | default in TRL | |", "|---|---|---|---|---|"]
    for f in dataclasses.fields(GRPOConfig):
        if "trl_default" not in f.metadata:
            continue
        toml = f.metadata["toml"]
        here = _toml_default(toml) if toml else None
        here_text = "—" if toml is None else "(newer grpo-tui)" if here is _MISSING else show(here)
        key = f"`{toml}`" if toml else "—"
        lines.append(f"| `{f.name}` | {key} | {here_text} | {show(f.metadata['trl_default'])} | {f.metadata['note']} |")
    return "\n".join(lines) + "\n"


__all__ = ["GRPOConfig", "ConfigError", "trl_name", "trl_table"]
