"""``config.toml`` -> typed, validated Structs, shared by the dashboard and the worker.

Every error is a ``ConfigError`` whose message names the key path, the bad value and what was
expected, e.g. ``grpo.loss_type: 'dpo' is not one of grpo, bnpo, dr_grpo, dapo``.
Relative paths resolve against the config file's folder.
"""

from __future__ import annotations

import math
import re
import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import msgspec

from grpo_tui.protocol import recipes
from grpo_tui.protocol.config_base import SEP as _SEP, Section as _Section, invalid as _invalid
from grpo_tui.protocol.config_curriculum import CurriculumConfig
from grpo_tui.protocol.config_doctor import DoctorConfig
from grpo_tui.protocol.config_errors import ConfigError as ConfigError, check_finite, explain
from grpo_tui.protocol.config_environments import EnvironmentConfig, ReasoningGymConfig
from grpo_tui.protocol.config_eval import EvalConfig
from grpo_tui.protocol.config_overrides import apply_override as apply_override
from grpo_tui.protocol.messages import SampleDisplay

SchedulerType = Literal["constant", "linear", "cosine", "constant_with_warmup", "cosine_with_min_lr"]

BUILTIN_REWARDS = ("accuracy", "xml_format", "length", "tool_use", "json_schema", "soft_overlong", "reasoning_gym")
# The params each built-in takes (its keyword parameters that no column or extra fills; a test holds
# them to the functions' signatures): any other would be silently ignored.
BUILTIN_REWARD_PARAMS: dict[str, tuple[str, ...]] = {
    "accuracy": (), "xml_format": ("tags",), "length": ("target", "max_completion_length", "min_length", "max_length", "unit"),
    "tool_use": ("required", "allowed_tools"),
    "json_schema": ("schema", "tag"), "soft_overlong": ("max_completion_length", "soft_punish_cache"),
    "reasoning_gym": (),
}

MIN_TEMPERATURE = 0.001  # generation.temperature: logits / temperature must stay finite in float32


def _check_length(params: dict[str, Any]) -> None:
    """``length``: a ``target`` in tokens, or a band (``min_length``/``max_length``, mlx-node's
    ``Length``) counted in ``unit`` = tokens or chars."""
    band = {k: params[k] for k in ("min_length", "max_length") if k in params}
    for key, value in band.items():
        if not _whole(value) or value < 1:
            raise _invalid("params", value, f"— length's {key} must be a whole number >= 1")
    if len(band) == 2 and band["min_length"] > band["max_length"]:
        raise _invalid("params", band["min_length"], f"— length's min_length must not exceed max_length ({band['max_length']})")
    if band and "target" in params:
        raise _invalid("params", params["target"], "— give length either a target or a band (min_length/max_length), not both")
    if "unit" in params and params["unit"] not in ("tokens", "chars"):
        raise _invalid("params", params["unit"], "— length's unit is \"tokens\" or \"chars\"")
    if params.get("unit") == "chars" and not band:
        raise _invalid("params", "chars", "— unit = \"chars\" counts a band: set min_length and/or max_length")


def _check_tool_use(params: dict[str, Any]) -> None:
    names = params.get("allowed_tools")
    if names is not None and not (isinstance(names, list) and all(isinstance(n, str) and n for n in names)):
        raise _invalid("params", names, "— tool_use's allowed_tools is a list of tool names, e.g. [\"multiply\"]")
    if not isinstance(params.get("required", False), bool):
        raise _invalid("params", params["required"], "— tool_use's required is true or false")


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_soft_overlong(params: dict[str, Any]) -> None:
    """DAPO's soft overlong punishment (TRL's ``get_soft_overlong_punishment``): its two lengths."""
    unknown = sorted(set(params) - {"max_completion_length", "soft_punish_cache"})
    if unknown:
        raise _invalid("params", unknown[0], "is not a soft_overlong parameter (max_completion_length, soft_punish_cache)")
    if "soft_punish_cache" not in params:
        raise _invalid("params", params, "— soft_overlong needs params.soft_punish_cache (tokens before the limit "
                                         "where the punishment starts, e.g. 4096 as in DAPO)")
    cache, limit = params["soft_punish_cache"], params.get("max_completion_length")
    if not _whole(cache) or cache < 0:
        raise _invalid("params", cache, "— soft_punish_cache must be a whole number of tokens >= 0")
    if limit is not None and (not _whole(limit) or limit < 1):
        raise _invalid("params", limit, "— max_completion_length must be a whole number of tokens >= 1")
    if limit is not None and cache > limit:
        raise _invalid("params", cache, f"— soft_punish_cache must not exceed max_completion_length ({limit})")




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


class DataConfig(_Section):
    path: str = ""  # a JSONL/JSON/CSV/Parquet file, a datasets save_to_disk folder or a hub dataset id
    reasoning_gym: ReasoningGymConfig | None = None  # instead of path: tasks generated in the worker
    eval_path: str | None = None
    split: str = "train"  # of a save_to_disk DatasetDict or a hub dataset
    eval_split: str | None = None  # held-out split of data.path when eval_path is not given
    subset: str | None = None  # a hub dataset's configuration name
    tools: str | None = None  # a JSON file of tool schemas for rows without a ``tools`` column
    system_prompt: str | None = None
    prompt_column: str = "prompt"
    answer_column: str = "answer"
    shuffle: bool = True
    seed: int = 0

    def __post_init__(self) -> None:
        if self.path == "" and self.reasoning_gym is None:
            raise ValueError(f"path{_SEP}is required: a JSONL, JSON, CSV or Parquet file, a saved dataset folder or a hub "
                             f"dataset id (or data.reasoning_gym instead, for generated tasks)")
        if self.path != "" and self.reasoning_gym is not None:
            raise _invalid("path", self.path, "— give data.path or data.reasoning_gym, not both")
        if self.reasoning_gym is not None and (self.eval_path is not None or self.eval_split is not None):
            key = "eval_path" if self.eval_path is not None else "eval_split"
            raise _invalid(key, getattr(self, key), "— data.reasoning_gym makes its own eval rows (its eval_seed, eval_size)")

    @property
    def label(self) -> str:
        """How messages name the training data."""
        return "data.reasoning_gym" if self.reasoning_gym is not None else self.path


class JudgeConfig(_Section):
    """A judge model as a reward (docs/config.md, "[[rewards]]"): loaded once, never trained."""

    model: str  # an mlx-lm model folder or a hub id
    prompt: str  # the judge's input: {completion} (and {prompt}) filled in, through its chat template
    score: Literal["yes_probability", "number"] = "yes_probability"
    yes: str = "yes"  # score = "yes_probability": the answer whose first-token probability is the score
    max_tokens: int = 16  # score = "number": the reply's length (greedy), its first number is the score
    batch_size: int = 16  # judge inputs per forward pass

    def __post_init__(self) -> None:
        if "{completion}" not in self.prompt:
            raise _invalid("prompt", self.prompt[:60], "must contain {completion} (and may contain {prompt})")
        if not self.yes:
            raise _invalid("yes", self.yes, "must not be empty")
        if self.max_tokens < 1:
            raise _invalid("max_tokens", self.max_tokens, "must be at least 1")
        if self.batch_size < 1:
            raise _invalid("batch_size", self.batch_size, "must be at least 1")


class RewardConfig(_Section):
    name: str | None = None  # a built-in
    function: str | None = None  # custom: "file.py:func" or "module:func"
    judge: JudgeConfig | None = None  # a judge model
    weight: float = 1.0
    timeout_s: float = 30.0
    on_error: Literal["raise", "skip"] = "raise"
    params: dict[str, Any] = {}

    def __post_init__(self) -> None:
        if (self.name is not None) + (self.function is not None) + (self.judge is not None) != 1:
            raise _invalid("name", self.name, "— give exactly one of `name` (a built-in), `function` or `judge`")
        if self.name is not None and self.name not in BUILTIN_REWARDS:
            raise _invalid("name", self.name, "is not one of " + ", ".join(BUILTIN_REWARDS))
        if self.function is not None and not re.fullmatch(r"[^:]+:[A-Za-z_]\w*", self.function):
            raise _invalid("function", self.function, "is not of the form file.py:func or module:func")
        if self.timeout_s < 0:
            raise _invalid("timeout_s", self.timeout_s, "must be >= 0 (0: no limit)")
        if self.name == "soft_overlong":
            _check_soft_overlong(self.params)
        elif self.name is not None and (unknown := sorted(set(self.params) - set(BUILTIN_REWARD_PARAMS[self.name]))):
            takes = ", ".join(BUILTIN_REWARD_PARAMS[self.name]) or "none"
            raise _invalid("params", unknown[0], f"is not a parameter of the built-in reward {self.name!r} (it takes: {takes})")
        elif self.name == "length":
            _check_length(self.params)
        elif self.name == "tool_use":
            _check_tool_use(self.params)

    @property
    def label(self) -> str:
        """The name shown in reward breakdowns."""
        if self.judge is not None:
            return "judge"
        return self.name or str(self.function).rsplit(":", 1)[1]


class ToolConfig(_Section):
    """One function the model may call during its rollouts (docs/config.md, "Tools")."""

    function: str  # "file.py:func" or "module:func"; its signature and docstring make the schema
    timeout_s: float = 10.0  # per call; a call still running then is abandoned and reported
    sandbox: bool = False  # each call in a child process with limits (grpo_tui.sandbox; docs/agents.md)

    def __post_init__(self) -> None:
        if not re.fullmatch(r"[^:]+:[A-Za-z_]\w*", self.function):
            raise _invalid("function", self.function, "is not of the form file.py:func or module:func")
        if self.timeout_s <= 0:
            raise _invalid("timeout_s", self.timeout_s, "must be > 0")


class GrpoConfig(_Section):
    group_size: int = 4
    loss_type: Literal["grpo", "bnpo", "dr_grpo", "dapo", "cispo", "sapo", "luspo", "vespo"] = "dapo"
    epsilon: float = 0.2
    epsilon_high: float | None = None  # defaults to epsilon
    beta: float = 0.0
    scale_rewards: Literal["group", "batch", "none"] = "group"
    # TRL 1.16's: advantages of the weighted sum (default), or each reward function normalised in its
    # group, then weighted, summed and normalised over the batch (scale_rewards is then not read)
    multi_objective_aggregation: Literal["sum_then_normalize", "normalize_then_sum"] = "sum_then_normalize"
    importance_sampling_level: Literal["token", "sequence"] = "token"
    mask_truncated_completions: bool = False
    mask_repetition_completions: bool = False  # also drop finish = "repetition" completions
    num_iterations: int = 1
    recipe: Literal["gspo", "dapo", "dr_grpo"] | None = None  # published settings (protocol/recipes.py)
    # DAPO's dynamic sampling: drop groups whose rewards are all equal, roll out more prompts until
    # the step has batch_size informative groups or max_sampling_rounds rollouts ran.
    dynamic_sampling: bool = False
    max_sampling_rounds: int = 3
    # TRL's top_entropy_quantile ("Beyond the 80/20 rule"): the policy loss keeps only this top
    # share of each micro-batch's tokens by entropy; 1.0 keeps every token.
    top_entropy_quantile: float = 1.0
    # TRL 1.16's options of the loss (docs/config.md, "Loss types"), under TRL's names and defaults,
    # except use_bias_correction_kl: off in a TOML run, as before it existed (GRPOConfig sets TRL's True)
    delta: float | None = None  # two-sided clipping: the ratio capped at delta (grpo, bnpo, dr_grpo, dapo, luspo)
    use_bias_correction_kl: bool = False  # the KL term times the importance ratio (DeepSeek-V3.2)
    off_policy_mask_threshold: float | None = None  # drop negative-advantage completions this far off-policy
    sapo_temperature_pos: float = 1.0
    sapo_temperature_neg: float = 1.05
    vespo_k_pos: float = 2.0
    vespo_lambda_pos: float = 3.0
    vespo_k_neg: float = 3.0
    vespo_lambda_neg: float = 2.0
    # TRL 1.16's entropy bonus: the loss minus entropy_coef × the micro-batch's mean token entropy;
    # use_adaptive_entropy moves the coefficient by entropy_coef_delta each optimizer step, within
    # [entropy_coef_min, entropy_coef_max], up while the entropy is at or below entropy_target
    # (and applies it only then), down otherwise
    entropy_coef: float = 0.0
    use_adaptive_entropy: bool = False
    entropy_coef_min: float = 0.0
    entropy_coef_max: float = 1.0
    entropy_coef_delta: float = 0.005
    entropy_target: float = 0.2
    # TRL's TR-DPO reference sync (beta > 0): every ref_model_sync_steps steps the reference
    # becomes ref_model_mixup_alpha * policy + (1 - alpha) * reference.
    sync_ref_model: bool = False
    ref_model_mixup_alpha: float = 0.6
    ref_model_sync_steps: int = 512

    def __post_init__(self) -> None:
        if self.group_size < 2:
            raise _invalid("group_size", self.group_size, "must be at least 2 (advantages compare a group)")
        if self.epsilon <= 0:
            raise _invalid("epsilon", self.epsilon, "must be > 0")
        if self.epsilon_high is None:
            self.epsilon_high = self.epsilon
        elif self.epsilon_high <= 0:
            raise _invalid("epsilon_high", self.epsilon_high, "must be > 0")
        if self.beta < 0:
            raise _invalid("beta", self.beta, "must be >= 0")
        if self.num_iterations < 1:
            raise _invalid("num_iterations", self.num_iterations, "must be at least 1")
        if self.max_sampling_rounds < 1:
            raise _invalid("max_sampling_rounds", self.max_sampling_rounds, "must be at least 1 (1 = drop groups, no extra rollout)")
        if self.sync_ref_model and self.beta == 0:
            raise _invalid("sync_ref_model", self.sync_ref_model, "needs grpo.beta > 0: with beta = 0 no reference model "
                                                                  "is used, so there is nothing to synchronize (as in TRL)")
        if not 0.0 <= self.ref_model_mixup_alpha <= 1.0:
            raise _invalid("ref_model_mixup_alpha", self.ref_model_mixup_alpha, "must be in [0, 1]")
        if self.ref_model_sync_steps < 1:
            raise _invalid("ref_model_sync_steps", self.ref_model_sync_steps, "must be at least 1")
        if self.delta is not None and self.delta <= 0:
            raise _invalid("delta", self.delta, "must be > 0 (TRL recommends more than 1 + epsilon)")
        if self.off_policy_mask_threshold is not None and self.off_policy_mask_threshold <= 0:
            raise _invalid("off_policy_mask_threshold", self.off_policy_mask_threshold, "must be > 0 (e.g. 0.5)")
        for name in ("sapo_temperature_pos", "sapo_temperature_neg"):  # the SAPO loss divides by them
            if getattr(self, name) <= 0:
                raise _invalid(name, getattr(self, name), "must be > 0")
        if not 0.0 <= self.top_entropy_quantile <= 1.0:
            raise _invalid("top_entropy_quantile", self.top_entropy_quantile, "must be in [0, 1] (1.0 keeps every token)")
        self._check_entropy_bonus()

    def _check_entropy_bonus(self) -> None:
        for name in ("entropy_coef_min", "entropy_coef_delta", "entropy_target"):
            if getattr(self, name) < 0:
                raise _invalid(name, getattr(self, name), "must be >= 0")
        if self.entropy_coef_max < self.entropy_coef_min:
            raise _invalid("entropy_coef_max", self.entropy_coef_max,
                           f"must be >= entropy_coef_min ({self.entropy_coef_min})")


class GenerationConfig(_Section):
    max_completion_length: int = 128
    # TRL's: prompts longer than this many tokens are cut from the left (None: never cut; a prompt
    # that with max_completion_length overflows the model's context is then refused at load)
    max_prompt_length: int | None = None
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    enable_thinking: bool = False
    stop: list[str] = []  # stop strings (vLLM / TRL); the text is cut before them
    repetition_stop_ngram: int = 0  # end a completion repeating one n-gram ...
    repetition_stop_count: int = 0  # ... this many times in a row; 0 = off
    max_tool_calls: int = 4  # tool calls run per completion when [[tools]] are configured

    def __post_init__(self) -> None:
        if self.max_completion_length < 1:
            raise _invalid("max_completion_length", self.max_completion_length, "must be at least 1")
        if self.max_prompt_length is not None and self.max_prompt_length < 1:
            raise _invalid("max_prompt_length", self.max_prompt_length, "must be at least 1 (leave it out to never cut)")
        if not self.temperature >= MIN_TEMPERATURE:
            raise _invalid("temperature", self.temperature, f"must be at least {MIN_TEMPERATURE} (below, the logits "
                                                            "divided by it overflow and every step is non-finite)")
        if not 0 < self.top_p <= 1:
            raise _invalid("top_p", self.top_p, "must be in (0, 1]")
        if self.top_k < 0:
            raise _invalid("top_k", self.top_k, "must be >= 0 (0 = off)")
        if not 0 <= self.min_p < 1:
            raise _invalid("min_p", self.min_p, "must be in [0, 1)")
        if self.repetition_penalty <= 0:
            raise _invalid("repetition_penalty", self.repetition_penalty, "must be > 0")
        if any(not s for s in self.stop):
            raise _invalid("stop", self.stop, "must not contain an empty string")
        if self.repetition_stop_ngram < 0:
            raise _invalid("repetition_stop_ngram", self.repetition_stop_ngram, "must be >= 0 (0 = off)")
        count = self.repetition_stop_count
        if count < 0 or count == 1:
            raise _invalid("repetition_stop_count", count, "must be 0 (off) or at least 2")
        if (self.repetition_stop_ngram > 0) != (count > 0):
            raise _invalid(
                "repetition_stop_count" if count == 0 else "repetition_stop_ngram",
                count if count == 0 else self.repetition_stop_ngram,
                "— set both repetition_stop_ngram and repetition_stop_count (or neither)",
            )
        if self.max_tool_calls < 0:
            raise _invalid("max_tool_calls", self.max_tool_calls, "must be >= 0 (0 = no tool is ever run)")


class TrainingConfig(_Section):
    learning_rate: float = 1e-5
    batch_size: int = 4  # prompts per step
    gradient_accumulation_steps: int = 1
    steps_per_generation: int = 1  # steps one generation feeds (TRL's generation reuse); > 1 trains off-policy
    num_epochs: int = 1
    max_steps: int = 0  # 0 = until the epochs end; > 0 overrides num_epochs (TRL)
    max_grad_norm: float = 1.0  # 0 = no clipping
    weight_decay: float = 0.0
    adam_beta1: float = 0.9  # AdamW's moment decays and epsilon (transformers' names and defaults)
    adam_beta2: float = 0.999
    adam_epsilon: float = 1e-8
    seed: int = 0
    nan_patience: int = 3  # consecutive non-finite steps before an emergency checkpoint
    silent_patience: int = 10  # steps in a row with all-None or all-equal rewards before the run stops; 0 = never
    lr_scheduler_type: SchedulerType = "constant"  # TRL / transformers names and formulas
    warmup_steps: int = 0
    warmup_ratio: float = 0.0
    min_lr_rate: float = 0.0  # cosine_with_min_lr's floor, a fraction of learning_rate
    # Memory switches (docs/config.md, "Memory"): each trades speed for memory, same numbers.
    gradient_checkpointing: bool = False  # TRL's name: recompute each block's activations backward
    vocab_chunk_size: int = 0  # positions per LM-head/log-softmax chunk; 0 = all at once
    logprob_batch_size: int = 0  # completions per log-prob/loss forward+backward; 0 = the micro-batch
    memory_limit_gb: float = 0.0  # pick the switches that fit this estimate; 0 = off

    def __post_init__(self) -> None:
        if self.learning_rate <= 0:
            raise _invalid("learning_rate", self.learning_rate, "must be > 0")
        if self.batch_size < 1:
            raise _invalid("batch_size", self.batch_size, "must be at least 1")
        if self.gradient_accumulation_steps < 1:
            raise _invalid("gradient_accumulation_steps", self.gradient_accumulation_steps, "must be at least 1")
        if self.batch_size % self.gradient_accumulation_steps:
            raise _invalid(
                "gradient_accumulation_steps",
                self.gradient_accumulation_steps,
                f"must divide training.batch_size ({self.batch_size})",
            )
        if self.steps_per_generation < 1:
            raise _invalid("steps_per_generation", self.steps_per_generation, "must be at least 1 (1 = a generation per step)")
        if self.num_epochs < 1:
            raise _invalid("num_epochs", self.num_epochs, "must be at least 1")
        if self.max_steps < 0:
            raise _invalid("max_steps", self.max_steps, "must be >= 0 (0 = until the epochs end)")
        if self.max_grad_norm < 0:
            raise _invalid("max_grad_norm", self.max_grad_norm, "must be >= 0 (0 = no clipping)")
        if self.weight_decay < 0:
            raise _invalid("weight_decay", self.weight_decay, "must be >= 0")
        for name in ("adam_beta1", "adam_beta2"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise _invalid(name, getattr(self, name), "must be in [0, 1)")
        if not self.adam_epsilon > 0:
            raise _invalid("adam_epsilon", self.adam_epsilon, "must be > 0")
        if self.nan_patience < 1:
            raise _invalid("nan_patience", self.nan_patience, "must be at least 1")
        if self.warmup_steps < 0:
            raise _invalid("warmup_steps", self.warmup_steps, "must be >= 0")
        if not 0.0 <= self.warmup_ratio < 1.0:
            raise _invalid("warmup_ratio", self.warmup_ratio, "must be in [0, 1)")
        if not 0.0 <= self.min_lr_rate <= 1.0:
            raise _invalid("min_lr_rate", self.min_lr_rate, "must be in [0, 1]")
        if self.silent_patience < 0:
            raise _invalid("silent_patience", self.silent_patience, "must be >= 0 (0 = never stop)")
        if self.vocab_chunk_size < 0:
            raise _invalid("vocab_chunk_size", self.vocab_chunk_size, "must be >= 0 (0 = the whole vocabulary pass at once)")
        if self.logprob_batch_size < 0:
            raise _invalid("logprob_batch_size", self.logprob_batch_size, "must be >= 0 (0 = the whole micro-batch)")
        if self.memory_limit_gb < 0 or not math.isfinite(self.memory_limit_gb):
            raise _invalid("memory_limit_gb", self.memory_limit_gb, "must be >= 0 (0 = off)")


class CheckpointConfig(_Section):
    output_dir: str = "runs/grpo"
    save_every: int = 50  # steps; 0 = only final / manual
    keep_last: int = 3  # periodic checkpoints kept; 0 = keep all
    resume: str | bool = "latest"  # "latest" | a checkpoint path | false

    def __post_init__(self) -> None:
        if self.save_every < 0:
            raise _invalid("save_every", self.save_every, "must be >= 0 (0 = only final and manual)")
        if self.keep_last < 0:
            raise _invalid("keep_last", self.keep_last, "must be >= 0 (0 = keep all)")
        if self.resume is True:
            self.resume = "latest"
        if self.resume == "":
            raise _invalid("resume", self.resume, 'must be "latest", a checkpoint path or false')


Tracker = Literal["wandb", "trackio", "tensorboard"]


class LoggingConfig(_Section):
    """Trackers the run reports to besides its own store (docs/trackers.md); rank 0 reports."""

    report_to: list[Tracker] = msgspec.field(default_factory=list)  # TRL's report_to
    steps: int = 1  # report every this many steps, the mean over them (TRL's logging_steps)
    log_completions: bool = False  # also a table of each logged step's completions (TRL's name)
    project: str = "grpo-tui"  # the W&B / Trackio project (TensorBoard: a folder in the output dir)

    def __post_init__(self) -> None:
        if self.steps < 1:
            raise _invalid("steps", self.steps, "must be at least 1")
        if len(set(self.report_to)) != len(self.report_to):
            raise _invalid("report_to", self.report_to, "names a tracker twice")


class StoreConfig(_Section):
    enabled: bool = True
    # The SQLite file; default <output_dir>/outputs.db. Several runs may share one (mlx-node's
    # outputStore.localPath): each is a row of its runs table.
    path: str | None = None
    # A store that fails SQLite's check at start: "stop" names it and the ways on; "fresh" keeps it
    # beside as outputs.damaged-<time>.db and starts a new one.
    if_damaged: Literal["stop", "fresh"] = "stop"


class DisplayConfig(_Section):
    sample_display: SampleDisplay = "best_worst"  # the protocol's modes (protocol/messages.py)
    restart_on_crash: bool = True
    restart_delay_s: float = 5.0
    max_restarts: int = 3

    def __post_init__(self) -> None:
        if self.restart_delay_s < 0:
            raise _invalid("restart_delay_s", self.restart_delay_s, "must be >= 0")
        if self.max_restarts < 0:
            raise _invalid("max_restarts", self.max_restarts, "must be >= 0")


class RuntimeConfig(_Section):
    # Linux mlx[cpu] links a slow reference BLAS; "auto" preloads an optimized one when found.
    blas: str = "auto"  # "auto" | "off" | path to a BLAS shared library


Backend = Literal["ring", "mpi", "jaccl", "nccl"]  # mx.distributed's backends, as mlx.launch names them


class DistributedConfig(_Section):
    """Data parallelism over mx.distributed, started by mlx.launch (docs/config.md, "[distributed]")."""

    ranks: int = 1  # local ranks (mlx.launch -n) when neither hosts nor hostfile is given
    backend: Backend = "ring"
    hosts: list[str] = msgspec.field(default_factory=list)  # mlx.launch --hosts
    hostfile: str | None = None  # mlx.launch --hostfile

    def __post_init__(self) -> None:
        if self.ranks < 1:
            raise _invalid("ranks", self.ranks, "must be at least 1")
        if self.hosts and self.hostfile:
            raise _invalid("hosts", self.hosts, "and distributed.hostfile are exclusive; give one")
        if any(not h or "," in h for h in self.hosts):
            raise _invalid("hosts", self.hosts, "must be host names, one per element")


class ForkConfig(_Section):
    """Where a forked run branched off (``grpo-tui fork``, docs/steering.md); fork writes it."""

    parent: str  # the parent's output folder (never written to)
    run_id: int = 0  # the parent's run in its store
    step: int = 0  # the parent's checkpoint it starts from: the fork's first step is step + 1


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
    names = [t.function.rsplit(":", 1)[1] for t in config.tools]
    for i, name in enumerate(names):  # the model calls a tool by its function's name
        if name in names[:i]:
            raise ConfigError(f"tools[{i}].function", f"{config.tools[i].function!r}: a second tool named {name!r}", file)
    return config


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
