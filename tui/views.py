"""The dashboard's tabs and the parts of the screen a state change refreshes, as closed sets
(docs/architecture.md, "Dashboard")."""

from __future__ import annotations

from typing import Literal, get_args

from grpo_tui.protocol.messages import SampleDisplay

# The tabs on the right, in key order (1-6): each is the id of its TabPane.
View = Literal["samples", "logs", "config", "database", "charts", "doctor"]
VIEWS: tuple[View, ...] = get_args(View)
VIEW_TITLES: dict[View, str] = {
    "samples": "Samples", "logs": "Logs", "config": "Config", "database": "Database", "charts": "Charts",
    "doctor": "Doctor",
}

# What ``RunState.apply`` reports as changed; the app refreshes each named part once per flush.
Part = Literal["header", "metrics", "progress", "stats", "samples", "config", "checkpoints", "database", "bindings",
               "doctor"]

# The sample display modes the ``m`` key cycles through (the protocol's, in its order).
DISPLAY_MODES: tuple[SampleDisplay, ...] = get_args(SampleDisplay)


def as_view(name: str | None) -> View | None:
    """``name`` when it is one of the tabs (a TabPane id), else None."""
    return next((v for v in VIEWS if v == name), None)
