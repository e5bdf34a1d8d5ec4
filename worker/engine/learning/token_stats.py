"""What the training pass reads off the vocabulary for each completion token, whichever way the
plan's head computes it (``logps.token_logps``): one shape for every head path."""

from __future__ import annotations

from typing import NamedTuple

import mlx.core as mx


class TokenStats(NamedTuple):
    """Per target token, (B, T) each, on logits / temperature."""

    logps: mx.array  # log-probability of the target (the loss's; differentiable)
    entropy: mx.array  # of the whole distribution (a metric: no gradient)
    is_top: mx.array  # 1.0 where the target is the most likely token (token accuracy; no gradient)
