"""What each architecture gets: the speed paths run only where tests prove them equal to stock
mlx-lm, and the engine log says why they are off elsewhere (docs/architecture.md, "Engine plan").

Tested end to end (tests/worker/engine/test_architectures.py: a GRPO step full, LoRA and 4-bit
LoRA, the checkpoint reloaded by mlx-lm, a generate): ``TESTED``. The speed paths (compiled
rollout, shared prompt, CPU kernels) additionally need the llama-family layout
(``accel.llama_family.MODEL_TYPES``) with full attention in every layer.
"""

from __future__ import annotations

from typing import Any

TESTED = ("qwen2", "qwen3", "llama", "mistral", "gemma2", "gemma3_text", "phi3", "qwen3_moe")
SPEED_PATH_TYPES = ("qwen2", "qwen3", "llama", "mistral")

# mlx-lm 0.32's gemma2 attention reshapes queries to (B, kv_heads, repeats, L, D) and cannot
# broadcast a batch's (B, 1, L, S) padding mask, so its rollout rows are generated one at a time.
ONE_ROW_ROLLOUT = {"gemma2": "mlx-lm's gemma2 cannot take a batched padding mask"}


def model_type(model: Any) -> str:
    return str(getattr(getattr(model, "args", None), "model_type", None) or type(model).__module__.rsplit(".", 1)[-1])


def sliding_layers(model: Any) -> bool:
    """Whether any layer attends through a sliding window (mlx-lm's llama ``layer_types``)."""
    layer_types = getattr(getattr(model, "args", None), "layer_types", None) or []
    return any(t != "full_attention" for t in layer_types)


def speed_paths_off(model: Any) -> str | None:
    """None when the llama-family speed paths may run on ``model``, else the log's reason (the
    condition is ``accel.llama_family.is_llama_family``'s, said in words)."""
    kind = model_type(model)
    if kind not in SPEED_PATH_TYPES:
        return (f"speed paths off for {kind}: the compiled rollout, shared prompt and CPU kernels are proven "
                f"equal to mlx-lm only on {', '.join(SPEED_PATH_TYPES)}, so stock mlx-lm runs")
    if sliding_layers(model):
        return f"speed paths off for {kind}: it has sliding-window layers, which they do not model"
    return None


def one_row_rollout(model: Any) -> str | None:
    """Why this model's rollout must run one row at a time, or None."""
    return ONE_ROW_ROLLOUT.get(model_type(model))
