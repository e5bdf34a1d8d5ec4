"""``[curriculum]``: which prompts a step draws (docs/curriculum.md). Off by default: the seeded
shuffle of every epoch, as without the section."""

from __future__ import annotations

from typing import Literal

from grpo_tui.protocol.config_base import Section, invalid

Strategy = Literal["off", "pass_rate", "levels"]


class CurriculumConfig(Section):
    """Each prompt's pass rate, a decayed average over its visits, sorts it into too hard (below
    ``min_pass_rate``), learning, or solved (above ``max_pass_rate``); a step draws learning and
    unseen prompts, and gives each of its slots to a set-aside prompt with ``revisit_probability``."""

    strategy: Strategy = "off"
    # a completion passes when its reward reaches this; None: the highest reward the run has seen
    pass_threshold: float | None = None
    # defaults measured on the quickstart (bench/README.md, "curriculum.py")
    min_pass_rate: float = 0.1
    max_pass_rate: float = 0.75
    revisit_probability: float = 0.05
    decay: float = 0.3  # the weight of a prompt's earlier visits in its pass rate (0: the last visit only)
    # strategy = "levels": the difficulty levels a reasoning-gym source is built at (a dataset with a
    # ``level`` column brings its own), and the share of the level's prompts solved that raises it
    levels: int = 3
    raise_level_at: float = 0.8

    def __post_init__(self) -> None:
        for name in ("min_pass_rate", "max_pass_rate", "revisit_probability", "raise_level_at"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise invalid(name, value, "must be in [0, 1]")
        if self.min_pass_rate > self.max_pass_rate:
            raise invalid("min_pass_rate", self.min_pass_rate, f"must not exceed max_pass_rate ({self.max_pass_rate})")
        if not 0.0 <= self.decay < 1.0:
            raise invalid("decay", self.decay, "must be in [0, 1) (0: a prompt's pass rate is its last visit's)")
        if self.levels < 1:
            raise invalid("levels", self.levels, "must be at least 1")

    @property
    def on(self) -> bool:
        return self.strategy != "off"
