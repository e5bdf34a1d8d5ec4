"""``config.toml`` -> typed, validated Structs, shared by the dashboard and the worker.

Every error is a ``ConfigError`` whose message names the key path, the bad value and what was
expected, e.g. ``grpo.loss_type: 'dpo' is not one of grpo, bnpo, dr_grpo, dapo``.
Relative paths resolve against the config file's folder.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec

from grpo_tui.protocol import recipes
from grpo_tui.protocol.config_async import AsyncConfig
from grpo_tui.protocol.config_base import Section as _Section, invalid as _invalid
from grpo_tui.protocol.config_curriculum import CurriculumConfig
from grpo_tui.protocol.config_doctor import DoctorConfig
from grpo_tui.protocol.config_errors import ConfigError as ConfigError, check_finite, explain
from grpo_tui.protocol.config_environments import EnvironmentConfig
from grpo_tui.protocol.config_eval import EvalConfig
from grpo_tui.protocol.config_overrides import apply_override as apply_override
# The sections live in their own modules (one per table); importing them from here keeps one address.
from grpo_tui.protocol.config_data import DataConfig
from grpo_tui.protocol.config_generation import MIN_TEMPERATURE, GenerationConfig
from grpo_tui.protocol.config_grpo import GrpoConfig
from grpo_tui.protocol.config_model import LoraConfig, ModelConfig
from grpo_tui.protocol.config_rewards import BUILTIN_REWARDS, BUILTIN_REWARD_PARAMS, JudgeConfig, RewardConfig, ToolConfig
from grpo_tui.protocol.config_run import (Backend, CheckpointConfig, DisplayConfig, DistributedConfig, ForkConfig, LoggingConfig,
                                          RuntimeConfig, StoreConfig, Tracker)
from grpo_tui.protocol.config_training import SchedulerType, TrainingConfig

__all__ = ["AsyncConfig", "Config", "ConfigError", "load_config", "parse_config", "validate", "apply_override",
           "DataConfig", "MIN_TEMPERATURE", "GenerationConfig", "GrpoConfig", "LoraConfig", "ModelConfig",
           "BUILTIN_REWARDS", "BUILTIN_REWARD_PARAMS", "JudgeConfig", "RewardConfig", "ToolConfig",
           "CheckpointConfig", "Tracker", "LoggingConfig", "StoreConfig", "DisplayConfig", "RuntimeConfig",
           "Backend", "DistributedConfig", "ForkConfig", "SchedulerType", "TrainingConfig"]


class Config(_Section):
    model: ModelConfig
    data: DataConfig
    rewards: list[RewardConfig] = []  # none only with an [environment] that scores itself (get_reward)
    name: str | None = None  # run name; defaults to the output folder's name
    grpo: GrpoConfig = msgspec.field(default_factory=GrpoConfig)
    generation: GenerationConfig = msgspec.field(default_factory=GenerationConfig)
    training: TrainingConfig = msgspec.field(default_factory=TrainingConfig)
    checkpoint: CheckpointConfig = msgspec.field(default_factory=CheckpointConfig)
    store: StoreConfig = msgspec.field(default_factory=StoreConfig)
    logging: LoggingConfig = msgspec.field(default_factory=LoggingConfig)
    display: DisplayConfig = msgspec.field(default_factory=DisplayConfig)
    runtime: RuntimeConfig = msgspec.field(default_factory=RuntimeConfig)
    eval: EvalConfig | None = None  # held-out evaluation when the [eval] table is present
    doctor: DoctorConfig = msgspec.field(default_factory=DoctorConfig)  # the run doctor's marks (docs/doctor.md)
    distributed: DistributedConfig = msgspec.field(default_factory=DistributedConfig)
    tools: list[ToolConfig] = []  # functions the model calls during rollouts (agent training)
    fork: ForkConfig | None = None  # a forked run: its parent (grpo-tui fork)
    environment: EnvironmentConfig | None = None  # TRL's environment_factory (docs/environments.md)
    curriculum: CurriculumConfig = msgspec.field(default_factory=CurriculumConfig)  # which prompts a step draws (docs/curriculum.md)
    async_: AsyncConfig = msgspec.field(default_factory=AsyncConfig, name="async")  # asynchronous GRPO (docs/async.md)

    def __post_init__(self) -> None:
        if not self.rewards and (self.environment is None or self.environment.rollout_func is not None):
            raise _invalid("rewards", self.rewards, "— at least one [[rewards]] table is needed")

    @property
    def accuracy_label(self) -> str | None:
        """The reward whose mean is a run's accuracy (eval, the doctor's pass rates): the first
        built-in ``accuracy`` or ``reasoning_gym`` configured."""
        return next((r.label for r in self.rewards if r.name in ("accuracy", "reasoning_gym")), None)

    @property
    def run_name(self) -> str:
        return self.name or Path(self.checkpoint.output_dir).name

    def to_dict(self) -> dict[str, Any]:
        """The resolved config as plain builtins (for ``init`` frames and the store)."""
        return msgspec.to_builtins(self)


# ---------------------------------------------------------------- loading


def load_config(path: str | Path, *, check_paths: bool = True, overrides: Sequence[str] = ()) -> Config:
    """Read, validate and resolve a config file. Raises ``ConfigError``.

    ``overrides`` are ``--set`` items, ``"training.learning_rate=1e-5"`` (``config_overrides``),
    applied over the file before validation."""
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8-sig")  # a BOM (some Windows editors) is not TOML
    except FileNotFoundError:
        raise ConfigError("", "config file not found", str(file)) from None
    except (IsADirectoryError, PermissionError, UnicodeDecodeError) as exc:
        raise ConfigError("", f"cannot read config file ({exc.__class__.__name__})", str(file)) from None
    base_dir = file.resolve().parent
    return parse_config(text, base_dir=base_dir, file=str(file), check_paths=check_paths, overrides=overrides)


def parse_config(
    text: str, *, base_dir: Path | None = None, file: str = "<config>", check_paths: bool = True,
    overrides: Sequence[str] = (),
) -> Config:
    """Validate TOML text. Relative paths resolve against ``base_dir`` (default: cwd)."""
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError("", f"TOML syntax error: {exc}", file) from None
    except RecursionError:  # tomllib recurses per nesting level
        raise ConfigError("", "TOML syntax error: arrays or tables nested too deeply", file) from None
    for item in overrides:  # --set: as if the file said it (so it wins over a recipe too)
        apply_override(raw, item, file)
    recipes.apply(raw)  # before validation: a key the file sets wins
    config = validate(raw, file)
    _resolve_paths(config, base_dir or Path.cwd(), file, check_paths)
    return config


def validate(raw: dict[str, Any], file: str = "<config>") -> Config:
    """The parsed TOML ``raw`` as a ``Config``, every key checked (paths are not resolved here).
    ``parse_config`` and a live run's changes (``live_settings``) share it: one sentence per mistake."""
    try:
        config = msgspec.convert(raw, Config)
    except msgspec.ValidationError as exc:
        key, message = explain(str(exc), raw, Config)
        raise ConfigError(key, message, file) from None
    check_finite(config, [], file)
    if config.training.steps_per_generation > 1 and config.grpo.dynamic_sampling:
        raise ConfigError("training.steps_per_generation",
                          f"{config.training.steps_per_generation} reuses one generation over several steps, while "
                          "grpo.dynamic_sampling rolls out more prompts within a step: set steps_per_generation = 1 "
                          "or dynamic_sampling = false", file)
    if config.grpo.sync_ref_model and config.model.lora is not None:
        raise ConfigError("grpo.sync_ref_model", "is not supported with [model.lora] (as in TRL with PEFT): the "
                          "reference is the base model; fine-tune fully or set sync_ref_model = false", file)
    if config.async_.on:
        _check_async(config, file)
    names = [t.function.rsplit(":", 1)[1] for t in config.tools]
    for i, name in enumerate(names):  # the model calls a tool by its function's name
        if name in names[:i]:
            raise ConfigError(f"tools[{i}].function", f"{config.tools[i].function!r}: a second tool named {name!r}", file)
    return config


def _check_async(config: Config, file: str) -> None:
    """What asynchronous GRPO cannot be combined with (docs/async.md, "Works with")."""
    k = config.async_.max_staleness
    if config.training.steps_per_generation > 1:
        raise ConfigError("async.max_staleness", f"{k} trains on generations made while the learner trains, while "
                          f"training.steps_per_generation = {config.training.steps_per_generation} reuses one "
                          "generation over several steps: use one of them (steps_per_generation = 1 or max_staleness = 0)", file)
    if config.curriculum.on:
        raise ConfigError("async.max_staleness", f"{k} is not supported with [curriculum] yet (the curriculum picks a "
                          "step's prompts from the scores of the steps before it, which the learner has not seen when "
                          "the generator runs ahead): set curriculum.strategy = \"off\" or max_staleness = 0", file)
    a = config.async_
    if config.grpo.loss_type == "vespo" and a.importance_sampling_correction and a.importance_sampling_mode.startswith("sequence"):
        raise ConfigError("async.importance_sampling_mode", f"{a.importance_sampling_mode!r}: the vespo loss takes the "
                          "correction into its per-token gamma weights, as in TRL: use 'token_truncate' or 'token_mask'", file)
    d = config.distributed
    if d.ranks > 1 or len(d.hosts) > 1 or d.hostfile is not None:
        raise ConfigError("async.max_staleness", f"{k} runs one learner process beside the generator; several learner "
                          "ranks ([distributed]) are not supported with it yet: remove the [distributed] ranks (with "
                          "async.generator_hosts, distributed.hosts may name the learner's own address) or set "
                          "max_staleness = 0", file)


_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")
_DATA_SUFFIXES = (".jsonl", ".json", ".csv", ".parquet", ".pq", ".txt", ".tsv", ".arrow")


def _resolve_paths(config: Config, base: Path, file: str, check: bool) -> None:
    def local(value: str, key: str) -> Path:
        try:  # NUL bytes and over-long names raise instead of "not found"
            p = Path(value).expanduser()
            p = p if p.is_absolute() else (base / p).resolve()
            p.exists()
        except (OSError, ValueError) as exc:
            raise ConfigError(key, f"{value!r} is not a usable path ({exc})", file) from None
        return p

    def must_exist(key: str, value: str) -> str:
        p = local(value, key)
        if check and not p.exists():
            where = str(p) if str(p).isprintable() else repr(str(p))  # errors stay one line
            raise ConfigError(key, f"{value!r} does not exist (looked at {where})", file)
        return str(p)

    model_path = local(config.model.path, "model.path")
    if model_path.exists() or not _HUB_ID.fullmatch(config.model.path):
        config.model.path = must_exist("model.path", config.model.path)
    def dataset(key: str, value: str) -> str:
        # a hub dataset id ("openai/gsm8k") needs no local file; a name with a data file's suffix is
        # a local path, so a mistyped "data/train.jsonl" is still reported here
        hub = _HUB_ID.fullmatch(value) and not value.lower().endswith(_DATA_SUFFIXES)
        return value if hub and not local(value, key).exists() else must_exist(key, value)

    if config.data.reasoning_gym is None:
        config.data.path = dataset("data.path", config.data.path)
    if config.data.eval_path is not None:
        config.data.eval_path = dataset("data.eval_path", config.data.eval_path)
    if config.data.tools is not None:
        config.data.tools = must_exist("data.tools", config.data.tools)
    for i, reward in enumerate(config.rewards):
        if reward.judge is not None:
            judge = reward.judge
            if local(judge.model, f"rewards[{i}].judge.model").exists() or not _HUB_ID.fullmatch(judge.model):
                judge.model = must_exist(f"rewards[{i}].judge.model", judge.model)
        if reward.function is not None:
            target, func = reward.function.rsplit(":", 1)
            if target.endswith((".py", ".pkl")):  # .pkl: functions pickled by the Python API
                reward.function = must_exist(f"rewards[{i}].function", target) + ":" + func
    for i, tool in enumerate(config.tools):
        target, func = tool.function.rsplit(":", 1)
        if target.endswith((".py", ".pkl")):
            tool.function = must_exist(f"tools[{i}].function", target) + ":" + func
    if (env := config.environment) is not None:
        def env_class(key: str, spec: str) -> str:
            target, name = spec.rsplit(":", 1)
            return must_exist(key, target) + ":" + name if target.endswith((".py", ".pkl")) else spec

        if env.class_ is not None:
            env.class_ = env_class("environment.class", env.class_)
        if env.rollout_func is not None:
            env.rollout_func = env_class("environment.rollout_func", env.rollout_func)
        env.classes = {n: env_class(f"environment.classes.{n}", s) for n, s in env.classes.items()}
    config.checkpoint.output_dir = str(local(config.checkpoint.output_dir, "checkpoint.output_dir"))
    if config.store.path is not None:
        config.store.path = str(local(config.store.path, "store.path"))
    resume = config.checkpoint.resume
    if isinstance(resume, str) and resume != "latest":
        config.checkpoint.resume = must_exist("checkpoint.resume", resume)
    if config.distributed.hostfile is not None:
        config.distributed.hostfile = must_exist("distributed.hostfile", config.distributed.hostfile)
    if config.runtime.blas not in ("auto", "off"):
        config.runtime.blas = must_exist("runtime.blas", config.runtime.blas)
