"""What the Python API's tests share: the bundled tiny model and a GRPOConfig small enough for a
few real worker steps on two cores."""

from __future__ import annotations

from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
TINY_MODEL = ROOT / "examples" / "models" / "tiny-arith"


def quick_args(tmp_path: Path, **kw: Any) -> Any:
    """A GRPOConfig of 4 steps, 4 completions of at most 16 tokens, one prompt a step."""
    from grpo_tui import GRPOConfig

    base = dict(output_dir=str(tmp_path / "run"), max_steps=4, learning_rate=5e-5, num_generations=4,
                max_completion_length=16, save_steps=2, logging_steps=1, gradient_checkpointing=False,
                lr_scheduler_type="constant", per_device_train_batch_size=4)
    return GRPOConfig(**{**base, **kw})


def chat_rows(n: int = 4) -> list[dict[str, Any]]:
    """Conversational rows as TRL's math datasets have them: a message list and a LaTeX ``solution``."""
    return [{"prompt": [{"role": "user", "content": f"What is {i}+{i}?"}], "solution": f"${2 * i}$"}
            for i in range(1, n + 1)]
