"""grpo-tui: GRPO training on MLX, watched from a terminal dashboard.

The Python API is shaped like TRL's (docs/python-api.md)::

    from grpo_tui import GRPOConfig, GRPOTrainer

    trainer = GRPOTrainer(model="Qwen/Qwen3-0.6B", reward_funcs=[my_reward],
                          args=GRPOConfig(output_dir="runs/x"), train_dataset=rows)
    trainer.train()

It writes a TOML config and runs the same worker process as ``grpo-tui run`` / ``grpo-tui worker``.
``Engine(config)`` runs the same trainer in this process instead, one phase at a time (``generate``,
``score``, ``train_step``).
TRL's script helpers (``ScriptArguments``, ``ModelConfig``, ``TrlParser``, ``get_peft_config``, ...)
are here too, and TRL's reward functions in ``grpo_tui.rewards``.
``grpo_tui.protocol``, ``grpo_tui.worker`` and ``grpo_tui.tui`` are the packages underneath.
"""

from typing import TYPE_CHECKING, Any

from grpo_tui.protocol import __version__

_SCRIPTS = ("DatasetConfig", "DatasetMixtureConfig", "ModelConfig", "ScriptArguments", "TrlParser", "get_dataset",
            "get_kbit_device_map", "get_peft_config", "get_quantization_config")

if TYPE_CHECKING:
    from grpo_tui.callbacks import TrainerControl
    from grpo_tui.config import GRPOConfig
    from grpo_tui.scripts import (DatasetConfig, DatasetMixtureConfig, ModelConfig, ScriptArguments, TrlParser,
                                  get_dataset, get_kbit_device_map, get_peft_config, get_quantization_config)
    from grpo_tui.trainer import GRPOTrainer, TrainerState, TrainingError
    from grpo_tui.worker.engine.stepwise import Engine

__all__ = ["Engine", "GRPOConfig", "GRPOTrainer", "TrainerControl", "TrainerState", "TrainingError", "__version__",
           "generate_rollout_completions",
           *_SCRIPTS]


def __getattr__(name: str) -> Any:
    """The API's classes are imported on first use: every ``grpo-tui`` command (the worker, the
    supervisor, the dashboard) imports this package first, and needs none of them."""
    if name == "GRPOConfig":
        from grpo_tui.config import GRPOConfig

        return GRPOConfig
    if name in ("GRPOTrainer", "TrainerState", "TrainingError"):
        from grpo_tui import trainer

        return getattr(trainer, name)
    if name in _SCRIPTS:  # TRL's script helpers (trl/scripts/grpo.py's skeleton)
        from grpo_tui import scripts

        return getattr(scripts, name)
    if name == "TrainerControl":
        from grpo_tui.callbacks import TrainerControl

        return TrainerControl
    if name == "Engine":  # the engine in this process, step by step: MLX comes in here
        from grpo_tui.worker.engine.stepwise import Engine

        return Engine
    raise AttributeError(f"module 'grpo_tui' has no attribute {name!r}")


def generate_rollout_completions(trainer: Any, prompts: list[Any], *, generation_overrides: dict[str, Any] | None = None,
                                 as_chat: bool | None = None) -> list[dict[str, Any]]:
    """TRL's helper for a ``rollout_func``, backed by grpo-tui's rollout engine (in the worker, on the
    policy being trained) instead of vLLM: one completion per prompt (a string as it is, or a message
    list through the chat template), each a dict with ``prompt_ids``, ``completion_ids`` (the stop
    token included), ``logprobs`` (one per completion token) and ``text``. ``generation_overrides``:
    ``temperature``, ``top_p``, ``top_k``, ``min_p``, ``max_tokens``, ``repetition_penalty``.
    ``trainer`` is the one the rollout function was given (docs/environments.md)."""
    generate = getattr(trainer, "generate_rollout_completions", None)
    if generate is None:
        raise TypeError("generate_rollout_completions: pass the trainer your rollout_func was given (it runs in the worker)")
    result: list[dict[str, Any]] = generate(prompts, generation_overrides=generation_overrides, as_chat=as_chat)
    return result
