"""Every field of TRL 1.16's ``GRPOConfig`` and of transformers' ``TrainingArguments`` (5.x, and the
4.x ones 5.x removed), each declared once with its TRL default and its fate:

- **mapped** (``_key``: one TOML key; ``_own``: converted by hand in ``GRPOConfig.to_dict``),
- **ignored** (``_ignored``): accepted, and a value other than TRL's default is one warning line per
  run naming the field and why (``GRPOConfig.warnings()``),
- **refused** (``_refused``): a value other than the one grpo-tui implements is a ``TrainingError``
  in one sentence, since ignoring it would train something else than asked,
- **inert** (``_inert``): read by scripts, not by TRL's trainer either (``do_train``, ``local_rank``).

This module is the field list; ``api/config.py`` is what ``GRPOConfig`` does with it (conversion to
and from the TOML config, checks, warnings). The table in docs/config.md ("TRL names") is generated
from these declarations (``config.trl_table``).
"""

from __future__ import annotations

import copy
import dataclasses
import typing
from typing import Any

import msgspec

from grpo_tui.protocol.config import Config
from grpo_tui.protocol.config_base import attribute

MISSING = object()
NOT_YET = "not supported yet (TRL 1.16's newer losses and options come in a later grpo-tui)"
_VLLM = "generation runs in MLX inside the worker, not in vLLM"
_DISTRIBUTED = "ranks are mlx.launch processes here ([distributed], docs/distributed.md)"
_HUB = ("grpo-tui is offline: nothing is uploaded; upload output_dir's final/ folder yourself "
        "(huggingface_hub's upload_folder)")
_TORCH = "there is no PyTorch here: MLX runs the model"
DATALOADER = "the worker reads the dataset itself, in the order data.shuffle and data.seed give"
_NO_EFFECT = "read by scripts; TRL's trainer does not read it either"
# optim: the AdamW variants (the worker's optimizer is AdamW); approximations of it are run as AdamW
ADAMW = ("adamw_torch", "adamw_torch_fused", "adamw_hf", "adamw_apex_fused", "adamw_torch_xla",
          "adamw_torch_npu_fused", "adamw_anyprecision")
ADAMW_LIKE = ("adamw_bnb_8bit", "adamw_8bit", "paged_adamw_32bit", "paged_adamw_8bit", "adamw_torch_4bit",
               "adamw_torch_8bit")
GENERATION_KWARGS = {"temperature": "temperature", "top_p": "top_p", "top_k": "top_k", "min_p": "min_p",
                      "repetition_penalty": "repetition_penalty", "stop": "stop"}
MODEL_INIT_IGNORED = {"attn_implementation": "MLX has one attention", "device_map": "MLX places the model",
                       "trust_remote_code": "mlx-lm runs its own model code", "revision": "a hub revision",
                       "use_cache": "the rollout keeps its own cache", "low_cpu_mem_usage": "loading is MLX's",
                       "use_kernels": "there are no transformers kernels here"}


def toml_default(key: str) -> Any:
    """The default of a TOML key, read from the config's own classes (``MISSING`` when this
    version of grpo-tui has no such key)."""
    tp: Any = Config
    *tables, name = key.split(".")
    for table in tables:
        hints = typing.get_type_hints(tp)
        table = attribute(tp, table)
        if table not in hints:
            return MISSING
        tp = hints[table]
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        tp = args[0] if args and isinstance(args[0], type) and issubclass(args[0], msgspec.Struct) else tp
    fields = {f.name: f for f in msgspec.structs.fields(tp)}
    if name not in fields:
        return MISSING
    f = fields[name]
    if f.default is not msgspec.NODEFAULT:
        return f.default
    return f.default_factory() if f.default_factory is not msgspec.NODEFAULT else MISSING


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


def _refused(trl_default: Any, why: str, *, ours: Any = MISSING) -> Any:
    """Only ``ours`` (TRL's default unless given) is accepted: another value is refused with ``why``."""
    return _field(trl_default, fate="refused", note=why, ours=trl_default if ours is MISSING else ours)


def _inert(trl_default: Any, why: str = _NO_EFFECT) -> Any:
    return _field(trl_default, fate="inert", note=why)


@dataclasses.dataclass
class TRLFields:
    """The fields of ``GRPOConfig`` (its docstring says how to use them), declared with their fates."""

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
        None, note="completions generated at once, as TRL's: `training.steps_per_generation` = generation_batch_size ÷ "
        "(per_device_train_batch_size × gradient_accumulation_steps) optimizer steps fed by one generation")
    steps_per_generation: int | None = _own(
        None, note="micro-steps per generation, as TRL's: `training.steps_per_generation` = steps_per_generation ÷ "
        "gradient_accumulation_steps optimizer steps fed by one generation (the later ones off-policy, as in TRL); "
        "a generation must span whole optimizer steps")
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
    # [async]'s off-policy correction (docs/async.md): the sampler is the generator's copy of the
    # policy, up to max_staleness steps old, instead of vLLM
    vllm_importance_sampling_correction: bool = _key("async.importance_sampling_correction", True,
                                                     note="applies with max_staleness > 0 (the sampler lags the learner)")
    vllm_importance_sampling_mode: str = _key("async.importance_sampling_mode", "sequence_mask")
    vllm_importance_sampling_clip_max: float | None = _key("async.importance_sampling_clip_max", 3.0)
    vllm_importance_sampling_clip_min: float | None = _key("async.importance_sampling_clip_min", None)
    vllm_importance_sampling_cap: float | None = _ignored(
        None, "deprecated in TRL 1.16 for vllm_importance_sampling_clip_max, which is taken")
    # TRL 1.18's AsyncGRPOConfig names: the generator runs ahead of the learner (docs/async.md)
    max_staleness: int = _key("async.max_staleness", 0, note="AsyncGRPOTrainer's (its default 4); 0: synchronous")
    weight_sync_steps: int = _key("async.weight_sync_steps", 1)
    use_transformers_continuous_batching: bool = _ignored(False, "the rollout batches in MLX")
    transformers_continuous_batching_config: dict[str, Any] | None = _ignored(None, "the rollout batches in MLX")
    use_transformers_paged: bool = _ignored(False, "the rollout batches in MLX")
    # ---- the loss
    beta: float = _key("grpo.beta", 0.0)
    num_iterations: int = _key("grpo.num_iterations", 1)
    epsilon: float = _key("grpo.epsilon", 0.2)
    delta: float | None = _key("grpo.delta", None)
    epsilon_high: float | None = _key("grpo.epsilon_high", None, note="None = epsilon in both")
    sapo_temperature_neg: float = _key("grpo.sapo_temperature_neg", 1.05)
    sapo_temperature_pos: float = _key("grpo.sapo_temperature_pos", 1.0)
    vespo_k_pos: float = _key("grpo.vespo_k_pos", 2.0)
    vespo_lambda_pos: float = _key("grpo.vespo_lambda_pos", 3.0)
    vespo_k_neg: float = _key("grpo.vespo_k_neg", 3.0)
    vespo_lambda_neg: float = _key("grpo.vespo_lambda_neg", 2.0)
    importance_sampling_level: str = _key("grpo.importance_sampling_level", "token")
    reward_weights: list[float] | None = _own(None, note="`weight` of each `[[rewards]]` table, in order")
    multi_objective_aggregation: str = _key("grpo.multi_objective_aggregation", "sum_then_normalize")
    scale_rewards: str | bool = _key("grpo.scale_rewards", "group", note="True = \"group\", False = \"none\"")
    loss_type: str = _key("grpo.loss_type", "dapo")
    mask_truncated_completions: bool = _key("grpo.mask_truncated_completions", False)
    sync_ref_model: bool = _key("grpo.sync_ref_model", False)
    ref_model_mixup_alpha: float = _key("grpo.ref_model_mixup_alpha", 0.6)
    ref_model_sync_steps: int = _key("grpo.ref_model_sync_steps", 512)
    top_entropy_quantile: float = _key("grpo.top_entropy_quantile", 1.0)
    entropy_coef: float = _key("grpo.entropy_coef", 0.0)
    use_adaptive_entropy: bool = _key("grpo.use_adaptive_entropy", False)
    entropy_coef_min: float = _key("grpo.entropy_coef_min", 0.0)
    entropy_coef_max: float = _key("grpo.entropy_coef_max", 1.0)
    entropy_coef_delta: float = _key("grpo.entropy_coef_delta", 0.005)
    entropy_target: float = _key("grpo.entropy_target", 0.2)
    off_policy_mask_threshold: float | None = _key("grpo.off_policy_mask_threshold", None)
    use_bias_correction_kl: bool = _key("grpo.use_bias_correction_kl", True,
                                        note="TRL's True here; a TOML run's default is false (as before the key)")
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
    gradient_accumulation_steps: int = _key(
        "training.gradient_accumulation_steps", 1, note="micro-batches hold whole groups here: when it does not "
        "divide the step's prompts, gcd(prompts, this) micro-batches of `logprob_batch_size` = per_device_train_batch_size")
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
    logging_nan_inf_filter: bool = _inert(True, "non-finite steps are skipped and stop the run after nan_patience (training.on_nonfinite)")
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
    eval_steps: float | None = _key("eval.every", None, note="a ratio below 1 is refused")
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
    dataloader_drop_last: bool = _ignored(False, DATALOADER)
    dataloader_num_workers: int = _ignored(0, DATALOADER)
    dataloader_pin_memory: bool = _inert(True, DATALOADER)
    dataloader_persistent_workers: bool = _ignored(False, DATALOADER)
    dataloader_prefetch_factor: int | None = _ignored(None, DATALOADER)
    dataloader_multiprocessing_context: str | None = _ignored(None, DATALOADER)
    dataloader_in_order: bool = _inert(True, DATALOADER)
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
    group_by_length: bool = _ignored(False, DATALOADER)
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
