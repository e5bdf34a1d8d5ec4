"""The sampling temperature, applied in one place: the loss's log-probs and every sampler divide the
logits by it (docs/architecture.md, "Step data path"). A leaf, shared by the engine and its
accelerations."""

from __future__ import annotations

import mlx.core as mx


def inverse(temperature: float) -> float:
    """What the logits are multiplied by: 1 / temperature."""
    return 1.0 / temperature


def tempered(logits: mx.array, temperature: float) -> mx.array:
    """``logits / temperature``; at temperature 1 the logits themselves (the division would be a
    pass over them of its own, for the same numbers)."""
    return logits if temperature == 1.0 else logits / temperature
