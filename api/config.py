"""``GRPOConfig``: TRL's training arguments, converted to and from grpo-tui's TOML config.

The TOML config (``protocol/config.py``) is the single source of truth: ``GRPOConfig`` is a view of
it under TRL's names. It has every field of TRL 1.16's ``GRPOConfig`` and of transformers'
``TrainingArguments`` (5.x, and the 4.x ones 5.x removed), each declared once with its TRL default
and its fate:

- **mapped** (``_key``: one TOML key; ``_own``: converted by hand in ``to_dict``),
- **ignored** (``_ignored``): accepted, and a value other than TRL's default is one warning line per
  run naming the field and why (``warnings()``),
- **refused** (``_refused``): a value other than the one grpo-tui implements is a ``TrainingError``
  in one sentence, since ignoring it would train something else than asked,
- **inert** (``_inert``): read by scripts, not by TRL's trainer either (``do_train``, ``local_rank``).

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

_MISSING = object()
_NOT_YET = "not supported yet (TRL 1.16's newer losses and options come in a later grpo-tui)"
_VLLM = "generation runs in MLX inside the worker, not in vLLM"
_DISTRIBUTED = "ranks are mlx.launch processes here ([distributed], docs/distributed.md)"
_HUB = ("grpo-tui is offline: nothing is uploaded; upload output_dir's final/ folder yourself "
        "(huggingface_hub's upload_folder)")
_TORCH = "there is no PyTorch here: MLX runs the model"
_DATALOADER = "the worker reads the dataset itself, in the order data.shuffle and data.seed give"
_NO_EFFECT = "read by scripts; TRL's trainer does not read it either"
# optim: the AdamW variants (the worker's optimizer is AdamW); approximations of it are run as AdamW
_ADAMW = ("adamw_torch", "adamw_torch_fused", "adamw_hf", "adamw_apex_fused", "adamw_torch_xla",
          "adamw_torch_npu_fused", "adamw_anyprecision")
_ADAMW_LIKE = ("adamw_bnb_8bit", "adamw_8bit", "paged_adamw_32bit", "paged_adamw_8bit", "adamw_torch_4bit",
               "adamw_torch_8bit")
_GENERATION_KWARGS = {"temperature": "temperature", "top_p": "top_p", "top_k": "top_k", "min_p": "min_p",
                      "repetition_penalty": "repetition_penalty", "stop": "stop"}
_MODEL_INIT_IGNORED = {"attn_implementation": "MLX has one attention", "device_map": "MLX places the model",
                       "trust_remote_code": "mlx-lm runs its own model code", "revision": "a hub revision",
                       "use_cache": "the rollout keeps its own cache", "low_cpu_mem_usage": "loading is MLX's",
                       "use_kernels": "there are no transformers kernels here"}


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


def _field(trl_default: Any, **meta: Any) -> Any:
    meta.setdefault("note", "")
    meta.setdefault("toml", None)
    meta["trl_default"] = trl_default
    if isinstance(trl_default, (list, dict)):
        return dataclasses.field(default_factory=lambda: copy.deepcopy(trl_default), metadata=meta)
    return dataclasses.field(default=trl_default, metadata=meta)


def _key(toml: str, trl_default: Any, *, note: str = "") -> Any:
    """A field standing for the TOML key ``toml`` (``section.key``)."""
    return _field(trl_default, fate="mapped", toml=toml, note=note)


def _own(trl_default: Any, *, note: str) -> Any:
    """A TRL field converted by hand in ``to_dict`` (``note`` says how)."""
    return _field(trl_default, fate="mapped", note=note)


def _ignored(trl_default: Any, why: str) -> Any:
    """Accepted; a value other than TRL's default is a warning line of the run, ``why`` it is ignored."""
    return _field(trl_default, fate="ignored", note=why)


def _refused(trl_default: Any, why: str, *, ours: Any = _MISSING) -> Any:
    """Only ``ours`` (TRL's default unless given) is accepted: another value is refused with ``why``."""
    return _field(trl_default, fate="refused", note=why, ours=trl_default if ours is _MISSING else ours)


def _inert(trl_default: Any, why: str = _NO_EFFECT) -> Any:
    return _field(trl_default, fate="inert", note=why)


@dataclasses.dataclass
class GRPOConfig:
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

    # ---- TRL's GRPOConfig: the model and data
    output_dir: str | None = _key("checkpoint.output_dir", "trainer_output")
    run_name: str | None = _key("name", None)
    model_init_kwargs: dict[str, Any] | str | None = _own(
        None, note="`dtype` / `torch_dtype` → `model.dtype`; `quantization_config` refused (give a quantized "
        "mlx-community model for QLoRA); device and attention keys ignored with a warning")
    trust_remote_code: bool = _ignored(False, "mlx-lm runs its own model code; no remote code runs")
    router_aux_loss_coef: float | None = _ignored(None, "no router auxiliary loss is added to the GRPO loss")
    disable_dropout: bool = _ignored(False, "mlx-lm models train without dropout; LoRA's is peft_config's lora_dropout")
    cast_lm_head_to_fp32: bool = _ignored(
        False, "the LM head keeps the weights' dtype (float32 unless bf16/fp16 or model_init_kwargs' dtype is set)")
    remove_unused_columns: bool = _inert(False, "every dataset column reaches the reward functions")
    shuffle_dataset: bool = _key("data.shuffle", True)
    pad_to_multiple_of: int | str | None = _ignored("auto", "the worker pads its batches itself")
    # ---- generation
    num_generations: int = _key("grpo.group_size", 8)
    num_generations_eval: int | None = _own(
        None, note="`eval.num_samples` with `eval.greedy = false` (TRL's evaluation samples)")
    max_completion_length: int = _key("generation.max_completion_length", 512)
    max_prompt_length: int | None = _key("generation.max_prompt_length", None, note="removed from TRL 1.x; kept")
    ds3_gather_for_generation: bool = _ignored(True, "there is no DeepSpeed here")
    generation_batch_size: int | None = _own(
        None, note="completions generated at once: must be one optimizer step's (per_device_train_batch_size × "
        "gradient_accumulation_steps); generations reused over several optimizer steps are refused (not supported yet)")
    steps_per_generation: int | None = _own(
        None, note="must equal gradient_accumulation_steps (one generation per optimizer step); more is refused "
        "(not supported yet)")
    temperature: float = _key("generation.temperature", 1.0)
    top_p: float = _key("generation.top_p", 1.0)
    top_k: int = _key("generation.top_k", 0)
    min_p: float | None = _key("generation.min_p", None, note="None = 0.0, off")
    repetition_penalty: float = _key("generation.repetition_penalty", 1.0)
    generation_kwargs: dict[str, Any] | None = _own(
        None, note="`temperature`, `top_p`, `top_k`, `min_p`, `repetition_penalty`, `stop` → `[generation]`; "
        "`skip_special_tokens` ignored; any other key refused")
    chat_template_kwargs: dict[str, Any] | None = _own(
        None, note="`enable_thinking` → `generation.enable_thinking`; any other key refused")
    cache_implementation: str | None = _ignored(None, "the rollout keeps its own KV cache")
    max_tool_calling_iterations: int | None = _key("generation.max_tool_calls", None,
                                                   note="None (no limit in TRL) keeps grpo-tui's 4")
    # ---- vLLM and transformers' generation backends
    use_vllm: bool = _ignored(False, _VLLM)
    vllm_mode: str = _ignored("colocate", _VLLM)
    vllm_model_impl: str = _ignored("vllm", _VLLM)
    vllm_enable_sleep_mode: bool = _ignored(False, _VLLM)
    vllm_structured_outputs_regex: str | None = _refused(
        None, "constrained generation with a regex is not supported: the model samples freely")
    vllm_server_base_url: str | None = _ignored(None, _VLLM)
    vllm_server_host: str = _ignored("0.0.0.0", _VLLM)
    vllm_server_port: int = _ignored(8000, _VLLM)
    vllm_server_timeout: float = _ignored(240.0, _VLLM)
    vllm_group_port: int = _ignored(51216, _VLLM)
    vllm_gpu_memory_utilization: float = _ignored(0.3, _VLLM)
    vllm_max_model_length: int | None = _ignored(None, _VLLM)
    vllm_tensor_parallel_size: int = _ignored(1, _VLLM)
    vllm_importance_sampling_correction: bool = _ignored(
        True, "the rollout samples from the trained weights themselves, so there is no sampler mismatch to correct")
    vllm_importance_sampling_mode: str = _ignored("sequence_mask", "no vLLM sampler mismatch to correct here")
    vllm_importance_sampling_clip_max: float = _ignored(3.0, "no vLLM sampler mismatch to correct here")
    vllm_importance_sampling_clip_min: float | None = _ignored(None, "no vLLM sampler mismatch to correct here")
    vllm_importance_sampling_cap: float | None = _ignored(None, "no vLLM sampler mismatch to correct here")
    use_transformers_continuous_batching: bool = _ignored(False, "the rollout batches in MLX")
    transformers_continuous_batching_config: dict[str, Any] | None = _ignored(None, "the rollout batches in MLX")
    use_transformers_paged: bool = _ignored(False, "the rollout batches in MLX")
    # ---- the loss
    beta: float = _key("grpo.beta", 0.0)
    num_iterations: int = _key("grpo.num_iterations", 1)
    epsilon: float = _key("grpo.epsilon", 0.2)
    delta: float | None = _refused(None, _NOT_YET)
    epsilon_high: float | None = _key("grpo.epsilon_high", None, note="None = epsilon in both")
    sapo_temperature_neg: float = _refused(1.05, _NOT_YET)
    sapo_temperature_pos: float = _refused(1.0, _NOT_YET)
    vespo_k_pos: float = _refused(2.0, _NOT_YET)
    vespo_lambda_pos: float = _refused(3.0, _NOT_YET)
    vespo_k_neg: float = _refused(3.0, _NOT_YET)
    vespo_lambda_neg: float = _refused(2.0, _NOT_YET)
    importance_sampling_level: str = _key("grpo.importance_sampling_level", "token")
    reward_weights: list[float] | None = _own(None, note="`weight` of each `[[rewards]]` table, in order")
    multi_objective_aggregation: str = _refused(
        "sum_then_normalize", "normalize_then_sum is " + _NOT_YET + "; sum_then_normalize is what runs")
    scale_rewards: str | bool = _key("grpo.scale_rewards", "group", note="True = \"group\", False = \"none\"")
    loss_type: str = _key("grpo.loss_type", "dapo", note="cispo, sapo, luspo, vespo: " + _NOT_YET)
    mask_truncated_completions: bool = _key("grpo.mask_truncated_completions", False)
    sync_ref_model: bool = _key("grpo.sync_ref_model", False)
    ref_model_mixup_alpha: float = _key("grpo.ref_model_mixup_alpha", 0.6)
    ref_model_sync_steps: int = _key("grpo.ref_model_sync_steps", 512)
    top_entropy_quantile: float = _key("grpo.top_entropy_quantile", 1.0)
    entropy_coef: float = _refused(0.0, _NOT_YET)
    use_adaptive_entropy: bool = _refused(False, _NOT_YET)
    entropy_coef_min: float = _refused(0.0, _NOT_YET)
    entropy_coef_max: float = _refused(1.0, _NOT_YET)
    entropy_coef_delta: float = _refused(0.005, _NOT_YET)
    entropy_target: float = _refused(0.2, _NOT_YET)
    off_policy_mask_threshold: float | None = _refused(None, _NOT_YET)
    use_bias_correction_kl: bool = _refused(
        True, "True is " + _NOT_YET + "; the KL term is not importance-weighted here (False), which differs "
        "from TRL only with beta > 0 and num_iterations > 1", ours=False)
    # ---- logging completions
    log_completions: bool = _key("logging.log_completions", False, note="also a table in the terminal, as TRL's")
    num_completions_to_print: int | None = _own(None, note="rows of that terminal table (None: all)")
    log_multimodal: bool = _inert(True, "there are no images here")
    log_unique_prompts: bool = _ignored(False, "the completions table shows every completion")
    log_completions_hub_repo: str | None = _ignored(None, _HUB)

    # ---- transformers' TrainingArguments: optimization
    per_device_train_batch_size: int = _own(
        8, note="completions per micro-batch in TRL: `training.batch_size` (prompts per step) = "
        "this × gradient_accumulation_steps ÷ num_generations")
    num_train_epochs: float = _key("training.num_epochs", 3.0, note="whole epochs here")
    max_steps: int = _key("training.max_steps", -1, note="-1 = 0 here: train until the epochs end")
    learning_rate: float = _key("training.learning_rate", 1e-6)
    lr_scheduler_type: str = _key("training.lr_scheduler_type", "linear")
    lr_scheduler_kwargs: dict[str, Any] | str | None = _own(
        None, note="`min_lr_rate` (or `min_lr`) → `training.min_lr_rate`; any other key refused")
    warmup_steps: float = _key("training.warmup_steps", 0, note="below 1: a ratio, `training.warmup_ratio`")
    warmup_ratio: float = _key("training.warmup_ratio", 0.0, note="transformers 4.x")
    optim: str = _own("adamw_torch_fused", note="AdamW variants run as AdamW; 8-bit and paged AdamW run as float "
                      "AdamW with a warning; any other optimizer refused")
    optim_args: str | None = _refused(None, "the optimizer takes adam_beta1, adam_beta2, adam_epsilon, weight_decay")
    optim_target_modules: Any = _refused(None, "GaLore-style optimizers are not supported")
    weight_decay: float = _key("training.weight_decay", 0.0)
    adam_beta1: float = _key("training.adam_beta1", 0.9)
    adam_beta2: float = _key("training.adam_beta2", 0.999)
    adam_epsilon: float = _key("training.adam_epsilon", 1e-8)
    gradient_accumulation_steps: int = _key("training.gradient_accumulation_steps", 1)
    average_tokens_across_devices: bool = _inert(True, "the loss is normalised over every rank's tokens already")
    max_grad_norm: float = _key("training.max_grad_norm", 1.0)
    label_smoothing_factor: float = _inert(0.0, "GRPO's loss has no labels to smooth")
    # ---- precision and memory
    bf16: bool | None = _own(None, note="True → `model.dtype = \"bfloat16\"` (the weights themselves, not mixed "
                             "precision); None keeps the stored dtype (TRL: bf16 mixed precision)")
    fp16: bool = _own(False, note="True → `model.dtype = \"float16\"`")
    bf16_full_eval: bool = _ignored(False, "evaluation runs in the weights' dtype")
    fp16_full_eval: bool = _ignored(False, "evaluation runs in the weights' dtype")
    tf32: bool | None = _ignored(None, _TORCH)
    activation_checkpointing: bool | None = _own(None, note="True → `training.gradient_checkpointing`")
    activation_checkpointing_kwargs: dict[str, Any] | None = _ignored(None, _TORCH)
    gradient_checkpointing: bool = _key("training.gradient_checkpointing", True)
    gradient_checkpointing_kwargs: dict[str, Any] | str | None = _ignored(None, _TORCH)
    torch_compile: bool = _ignored(False, _TORCH + "; the worker compiles with mx.compile itself")
    torch_compile_backend: str | None = _ignored(None, _TORCH)
    torch_compile_mode: str | None = _ignored(None, _TORCH)
    use_liger_kernel: bool = _ignored(False, _TORCH + "; the worker has its own fused kernels")
    liger_kernel_config: dict[str, Any] | None = _ignored(None, _TORCH)
    use_cache: bool = _inert(False, "the rollout keeps its own KV cache")
    neftune_noise_alpha: float | None = _refused(None, "NEFTune's embedding noise is not supported")
    torch_empty_cache_steps: int | None = _ignored(None, _TORCH)
    auto_find_batch_size: bool = _refused(
        False, "GRPO cannot halve its batch (as TRL refuses it); training.memory_limit_gb picks the memory switches")
    # ---- logging
    logging_strategy: str = _own("steps", note="\"steps\"; \"epoch\" and \"no\" refused")
    logging_steps: float = _key("logging.steps", 10, note="a ratio below 1 is refused")
    logging_first_step: bool = _own(False, note="log_history also has step 1")
    log_on_each_node: bool = _inert(True, "rank 0 logs")
    logging_nan_inf_filter: bool = _inert(True, "non-finite steps are skipped and stop the run after nan_patience")
    include_num_input_tokens_seen: str | bool = _inert("no", "log_history has num_tokens")
    log_level: str = _inert("passive")
    log_level_replica: str = _inert("warning")
    disable_tqdm: bool | None = _own(None, note="True: no progress bar")
    report_to: list[str] | str | None = _key("logging.report_to", "none", note='"none" = [], a name = [name]')
    project: str = _key("logging.project", "huggingface")
    trackio_space_id: str | None = _ignored(None, _HUB)
    trackio_bucket_id: str | None = _ignored(None, _HUB)
    trackio_static_space_id: str | None = _ignored(None, _HUB)
    # ---- evaluation
    eval_strategy: str = _own("no", note="\"steps\" → `[eval]` every eval_steps (else logging_steps), at_start = "
                              "eval_on_start, no evaluation after the last step; \"no\" given: no evaluation while "
                              "training; unset with an eval_dataset: `[eval]`'s defaults; \"epoch\" refused")
    eval_steps: float | None = _key("eval.every", None)
    eval_delay: float = _ignored(0, "evaluation follows eval_strategy from the first step")
    per_device_eval_batch_size: int = _inert(8, "the evaluation batches its prompts itself (eval.batch_size)")
    prediction_loss_only: bool = _inert(False, "evaluation generates and scores; it computes no loss")
    eval_on_start: bool = _own(False, note="`eval.at_start` with eval_strategy")
    eval_do_concat_batches: bool = _inert(True, "evaluation reports means")
    eval_use_gather_object: bool = _inert(False, "evaluation reports means")
    eval_accumulation_steps: int | None = _inert(None, "evaluation reports means")
    include_for_metrics: list[str] = _inert([], "there is no compute_metrics")
    batch_eval_metrics: bool = _inert(False, "there is no compute_metrics")
    # ---- checkpoints
    save_only_model: bool = _ignored(False, "checkpoints keep the optimizer and state, so a resume continues")
    save_strategy: str = _own("steps", note="\"steps\" → `checkpoint.save_every = save_steps`, \"no\" → 0; "
                              "\"epoch\" and \"best\" refused")
    save_steps: float = _key("checkpoint.save_every", 500, note="a ratio below 1 is refused")
    save_on_each_node: bool = _inert(False, "rank 0 saves")
    save_total_limit: int | None = _key("checkpoint.keep_last", None, note="None = keep all (0 here)")
    enable_jit_checkpoint: bool = _ignored(False, "a stop signal saves a checkpoint anyway")
    push_to_hub: bool = _ignored(False, _HUB)
    hub_token: str | None = _ignored(None, _HUB)
    hub_private_repo: bool | None = _ignored(None, _HUB)
    hub_model_id: str | None = _ignored(None, _HUB)
    hub_strategy: str = _ignored("every_save", _HUB)
    hub_always_push: bool = _ignored(False, _HUB)
    hub_revision: str | None = _ignored(None, _HUB)
    load_best_model_at_end: bool = _refused(
        False, "the final model is the last step's; keeping the best evaluation's is not supported")
    metric_for_best_model: str | None = _inert(None, "read with load_best_model_at_end only")
    greater_is_better: bool | None = _inert(None, "read with load_best_model_at_end only")
    ignore_data_skip: bool = _ignored(False, "a resume continues the dataset's order exactly")
    restore_callback_states_from_checkpoint: bool = _ignored(False, "callbacks keep no state across a resume here")
    # ---- seeds and devices
    full_determinism: bool = _inert(False, "a run is deterministic from its seed already")
    seed: int = _key("training.seed", 42)
    data_seed: int | None = _own(None, note="`data.seed` (None: seed, as TRL's sampler)")
    use_cpu: bool = _ignored(False, "MLX picks its device")
    accelerator_config: Any = _ignored(None, _DISTRIBUTED)
    parallelism_config: Any = _ignored(None, _DISTRIBUTED)
    # ---- data loading
    dataloader_drop_last: bool = _ignored(False, _DATALOADER)
    dataloader_num_workers: int = _ignored(0, _DATALOADER)
    dataloader_pin_memory: bool = _inert(True, _DATALOADER)
    dataloader_persistent_workers: bool = _ignored(False, _DATALOADER)
    dataloader_prefetch_factor: int | None = _ignored(None, _DATALOADER)
    dataloader_multiprocessing_context: str | None = _ignored(None, _DATALOADER)
    dataloader_in_order: bool = _inert(True, _DATALOADER)
    label_names: list[str] | None = _inert(None, "GRPO has no labels")
    train_sampling_strategy: str = _own("random", note="\"sequential\" → `data.shuffle = false`; "
                                        "\"group_by_length\" ignored with a warning")
    length_column_name: str = _inert("length", "read with group_by_length only")
    # ---- distributed
    ddp_find_unused_parameters: bool | None = _ignored(None, _DISTRIBUTED)
    ddp_bucket_cap_mb: int | None = _ignored(None, _DISTRIBUTED)
    ddp_broadcast_buffers: bool | None = _ignored(None, _DISTRIBUTED)
    ddp_static_graph: bool | None = _ignored(None, _DISTRIBUTED)
    ddp_backend: str | None = _ignored(None, _DISTRIBUTED)
    ddp_timeout: int = _ignored(1800, _DISTRIBUTED)
    fsdp: Any = _ignored(None, _DISTRIBUTED)
    fsdp_config: Any = _ignored(None, _DISTRIBUTED)
    deepspeed: Any = _ignored(None, _DISTRIBUTED)
    debug: str | list[Any] = _ignored("", _TORCH)
    skip_memory_metrics: bool = _inert(True, "log_history has peak_memory_mb")
    do_train: bool = _inert(False)
    do_eval: bool = _inert(False)
    do_predict: bool = _inert(False)
    resume_from_checkpoint: str | None = _inert(None, "give it to train(resume_from_checkpoint=...), as with TRL")
    local_rank: int = _inert(-1, "set by the launcher")
    # ---- transformers 4.x TrainingArguments that 5.x removed
    overwrite_output_dir: bool = _inert(False, "train() moves earlier checkpoints aside, never deletes them")
    per_gpu_train_batch_size: int | None = _ignored(None, "deprecated in transformers: per_device_train_batch_size")
    per_gpu_eval_batch_size: int | None = _ignored(None, "deprecated in transformers")
    logging_dir: str | None = _ignored(None, "TensorBoard writes under output_dir")
    save_safetensors: bool = _inert(True, "checkpoints are safetensors")
    no_cuda: bool = _ignored(False, "MLX picks its device")
    use_mps_device: bool = _ignored(False, "MLX picks its device")
    jit_mode_eval: bool = _ignored(False, _TORCH)
    fp16_opt_level: str = _ignored("O1", _TORCH)
    half_precision_backend: str = _ignored("auto", _TORCH)
    tpu_num_cores: int | None = _ignored(None, _TORCH)
    tpu_metrics_debug: bool = _ignored(False, _TORCH)
    past_index: int = _inert(-1, "no model here keeps past states")
    fsdp_min_num_params: int = _ignored(0, _DISTRIBUTED)
    fsdp_transformer_layer_cls_to_wrap: str | None = _ignored(None, _DISTRIBUTED)
    adafactor: bool = _refused(False, "the optimizer is AdamW")
    group_by_length: bool = _ignored(False, _DATALOADER)
    use_legacy_prediction_loop: bool = _inert(False, "there is no prediction loop")
    include_inputs_for_metrics: bool = _inert(False, "there is no compute_metrics")
    fp16_backend: str = _ignored("auto", _TORCH)
    push_to_hub_model_id: str | None = _ignored(None, _HUB)
    push_to_hub_organization: str | None = _ignored(None, _HUB)
    push_to_hub_token: str | None = _ignored(None, _HUB)
    mp_parameters: str = _ignored("", _TORCH)
    torchdynamo: str | None = _ignored(None, _TORCH)
    ray_scope: str | None = _ignored("last", "there is no hyperparameter search")
    include_tokens_per_second: bool = _inert(False, "log_history has generation_tokens_per_s and training_tokens_per_s")

    extra: dict[str, Any] = dataclasses.field(default_factory=dict, metadata={"toml": None})

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
            if f.name not in values and toml is not None and (here := _toml_default(toml)) is not _MISSING:
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
                here = _toml_default(toml)
                if _has(raw, toml) or toml in recipe_keys or _same(_toml_value(f.name, value), here):
                    continue  # extra (or its recipe) says it, or TRL's default is ours: the file leaves it out
            if f.name == "save_total_limit" and value is None:
                value = 0  # TRL's None (keep all) is 0 here
            if value is None:
                continue  # TRL's None: off, or grpo-tui's own default
            _put(raw, toml, _toml_value(f.name, value))
        self._convert(raw)
        return _prune(raw)

    def _convert(self, raw: dict[str, Any]) -> None:
        """The fields with no single TOML key (``_own``), onto ``raw``."""
        training = raw.setdefault("training", {})
        given = self.__dict__["_given"]
        if self._set("per_device_train_batch_size") and not (
            "per_device_train_batch_size" not in given and "batch_size" in training
        ):
            completions = self.per_device_train_batch_size * self.gradient_accumulation_steps
            if completions % self.num_generations:
                raise TrainingError(
                    f"per_device_train_batch_size: {self.per_device_train_batch_size} × gradient_accumulation_steps "
                    f"{self.gradient_accumulation_steps} completions must be a multiple of num_generations "
                    f"({self.num_generations})"
                )
            training["batch_size"] = completions // self.num_generations
        self._check_generation_batch()
        if self.reward_weights is not None and raw.get("rewards"):
            rewards = raw["rewards"]
            if len(rewards) != len(self.reward_weights):
                raise TrainingError(
                    f"reward_weights: {len(self.reward_weights)} weights for {len(rewards)} reward functions"
                )
            for table, weight in zip(rewards, self.reward_weights):
                table["weight"] = float(weight)
        dtype = self._dtype()
        if dtype is not None:
            raw.setdefault("model", {})["dtype"] = dtype
        if self.activation_checkpointing:
            training["gradient_checkpointing"] = True
        if isinstance(self.warmup_steps, float) and 0 < self.warmup_steps < 1:  # transformers 5: a ratio
            training.pop("warmup_steps", None)
            training["warmup_ratio"] = self.warmup_steps
        for key, value in _lr_scheduler_kwargs(self.lr_scheduler_kwargs, self.learning_rate).items():
            training[key] = value
        generation = raw.setdefault("generation", {})
        for key, value in (self.generation_kwargs or {}).items():
            if key in _GENERATION_KWARGS:
                generation[_GENERATION_KWARGS[key]] = _toml_value(key, value)
            elif key not in ("skip_special_tokens", "spaces_between_special_tokens"):
                raise TrainingError(
                    f"generation_kwargs: {key!r} is not supported here; the keys that are: "
                    + ", ".join(_GENERATION_KWARGS))
        for key, value in (self.chat_template_kwargs or {}).items():
            if key != "enable_thinking":
                raise TrainingError(f"chat_template_kwargs: {key!r} is not supported here; enable_thinking is")
            generation["enable_thinking"] = bool(value)
        _check_choice("optim", self.optim, _ADAMW + _ADAMW_LIKE, "AdamW is the optimizer here")
        _check_choice("logging_strategy", self.logging_strategy, ("steps",),
                      "give logging_steps, a number of steps")
        if isinstance(self.logging_steps, float) and self.logging_steps < 1:
            raise TrainingError(f"logging_steps: {self.logging_steps} — a ratio of the run is not supported; "
                                "give a number of steps")
        if isinstance(self.save_steps, float) and self.save_steps < 1:
            raise TrainingError(f"save_steps: {self.save_steps} — a ratio of the run is not supported; "
                                "give a number of steps")
        checkpoint = raw.setdefault("checkpoint", {})
        strategy = _text(self.save_strategy)
        _check_choice("save_strategy", strategy, ("steps", "no"), "give save_steps, a number of steps")
        if strategy == "no":
            checkpoint["save_every"] = 0
        if self._set("data_seed") and not ("data_seed" not in given and "seed" in raw.get("data", {})):
            seed = self.data_seed if self.data_seed is not None else self.seed
            if seed != _toml_default("data.seed") or "data_seed" in given:
                raw.setdefault("data", {})["seed"] = int(seed)
        sampling = _text(self.train_sampling_strategy)
        if sampling == "sequential":
            raw.setdefault("data", {})["shuffle"] = False
        eval_table = self._eval_table(raw.get("eval"))
        if eval_table is not None:
            raw["eval"] = eval_table

    def _eval_table(self, given_table: Any) -> dict[str, Any] | None:
        """``[eval]`` from eval_strategy and its companions (None: leave it as it is)."""
        strategy = _text(self.eval_strategy)
        _check_choice("eval_strategy", strategy, ("no", "steps"), "give eval_strategy=\"steps\" and eval_steps")
        table = dict(given_table) if isinstance(given_table, dict) else None
        if self.num_generations_eval is not None:
            table = {**(table or {}), "num_samples": int(self.num_generations_eval), "greedy": False}
        if strategy == "steps":
            table = dict(table or {})
            table["every"] = int(self.eval_steps if self.eval_steps is not None else self.logging_steps)
            table["at_start"] = bool(self.eval_on_start)
            table.setdefault("at_end", False)
        elif "eval_on_start" in self.__dict__["_given"] and table is not None:
            table["at_start"] = bool(self.eval_on_start)
        return table

    def evaluates_while_training(self) -> bool:
        """False when ``eval_strategy="no"`` was given: TRL then evaluates only in ``evaluate()``."""
        return not ("eval_strategy" in self.__dict__["_given"] and _text(self.eval_strategy) == "no")

    def _dtype(self) -> str | None:
        if self.bf16 and self.fp16:
            raise TrainingError("bf16, fp16: give one of them")
        kwargs = _init_kwargs(self.model_init_kwargs)
        dtype = kwargs.get("dtype", kwargs.get("torch_dtype"))
        if dtype is not None and str(dtype).removeprefix("torch.") != "auto":
            name = str(dtype).removeprefix("torch.")
            if name not in ("float32", "bfloat16", "float16"):
                raise TrainingError(f"model_init_kwargs: dtype {name!r} is not one of float32, bfloat16, float16, auto")
            return name
        if "quantization_config" in kwargs:
            raise TrainingError("model_init_kwargs: quantization_config is not supported; give a quantized "
                                "mlx-community model (LoRA on it is QLoRA)")
        return "bfloat16" if self.bf16 else "float16" if self.fp16 else None

    def _check_generation_batch(self) -> None:
        step = self.per_device_train_batch_size * self.gradient_accumulation_steps
        if self.generation_batch_size is not None and self.steps_per_generation is not None:
            raise TrainingError("generation_batch_size, steps_per_generation: give one of them (as TRL)")
        if self.generation_batch_size is not None and self.generation_batch_size != step:
            raise TrainingError(
                f"generation_batch_size: {self.generation_batch_size} completions at once is not one optimizer step's "
                f"({step} = per_device_train_batch_size × gradient_accumulation_steps); reusing generations over "
                "several optimizer steps is not supported yet")
        if self.steps_per_generation is not None and self.steps_per_generation != self.gradient_accumulation_steps:
            raise TrainingError(
                f"steps_per_generation: {self.steps_per_generation} differs from gradient_accumulation_steps "
                f"({self.gradient_accumulation_steps}); reusing generations over several optimizer steps is not "
                "supported yet")

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
                raise TrainingError(f"loss_type={self.loss_type!r}: {_NOT_YET}")

    def warnings(self) -> list[str]:
        """One line for each ignored field set to something other than TRL's default (and each
        ignored key of ``model_init_kwargs``): what the run prints once."""
        lines = []
        for f in dataclasses.fields(self):
            if f.metadata.get("fate") == "ignored" and not _same(getattr(self, f.name), f.metadata["trl_default"]):
                lines.append(f"{f.name}={getattr(self, f.name)!r} is ignored: {f.metadata['note']}")
        for key in _init_kwargs(self.model_init_kwargs):
            if key in _MODEL_INIT_IGNORED:
                lines.append(f"model_init_kwargs[{key!r}] is ignored: {_MODEL_INIT_IGNORED[key]}")
            elif key not in ("dtype", "torch_dtype", "quantization_config"):
                lines.append(f"model_init_kwargs[{key!r}] is ignored: the worker loads the model with mlx-lm")
        if self.optim in _ADAMW_LIKE:
            lines.append(f"optim={self.optim!r} runs as MLX's float AdamW")
        if _text(self.train_sampling_strategy) == "group_by_length":
            lines.append(f"train_sampling_strategy='group_by_length' is ignored: {_DATALOADER}")
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
        return 0  # a ratio: to_dict's caller puts it into warmup_ratio (_convert)
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
    """The GRPOConfig field for a TOML key path (itself when none stands for it)."""
    for f in dataclasses.fields(GRPOConfig):
        if f.metadata.get("toml") == toml_key:
            return f.name
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
        here = _toml_default(toml) if toml else None
        here_text = "—" if toml is None else "(newer grpo-tui)" if here is _MISSING else show(here)
        key = f"`{toml}`" if toml else "—"
        note = f.metadata["note"].replace("|", "\\|")
        lines.append(f"| `{f.name}` | {f.metadata['fate']} | {key} | {here_text} | "
                     f"{show(f.metadata['trl_default'])} | {note} |")
    return "\n".join(lines) + "\n"


__all__ = ["GRPOConfig", "ConfigError", "TrainingError", "trl_fates", "trl_name", "trl_table"]
