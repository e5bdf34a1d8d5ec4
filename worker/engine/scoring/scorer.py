"""The scorer: the run's reward functions (judges among them), its ``[[tools]]`` and its environment
(docs/architecture.md, "The step's spine"). Completions in, scores and what the functions logged out,
as TRL's ``GRPOTrainer`` calls its reward functions. No MLX here beyond what a judge loads.
"""

from __future__ import annotations

from typing import Any, Callable

from grpo_tui.protocol.config import Config
from grpo_tui.protocol.messages import LogLevel
from grpo_tui.worker.engine.policy.rollout import Completion
from grpo_tui.worker.engine.prompts import data
from grpo_tui.worker.engine.scoring import environments, judge
from grpo_tui.worker.engine.scoring.environments import Environments, Episode
from grpo_tui.worker.engine.scoring.reward_call import StepLog, TrainerState
from grpo_tui.worker.engine.scoring.rewards import Reward, score_completions
from grpo_tui.worker.engine.scoring.tools import RowTools, Tool

Scores = tuple[list[float | None], dict[str, list[float | None]], StepLog]  # totals, each function's, logged


class Scorer:
    """``score`` a round's completions; the environment's episodes begin and give their rewards here."""

    def __init__(self, config: Config, rewards: list[Reward], tools: list[Tool], environment: Environments | None,
                 log: Callable[[LogLevel, str], None]) -> None:
        self.config = config
        self.rewards = rewards
        self.tools = tools
        self.environment = environment
        self.log = log

    @property
    def weights(self) -> dict[str, float]:
        return {r.label: r.weight for r in self.rewards}

    def warn(self, message: str) -> None:
        self.log("warning", message)

    def begin(self, examples: list[data.Example], where: tuple[int, int, int], group_size: int,
              tokenizer: Any) -> tuple[list[data.Example], list[Episode] | None]:
        """A round's examples as its episodes see them, and the episodes (``environments.start``)."""
        return environments.start(self.environment, examples, where, group_size, tokenizer)

    def row_tools(self, episodes: list[Episode] | None, rows: range, group_size: int) -> list[RowTools] | None:
        return environments.row_tools(self.environment, episodes, self.tools, rows, group_size)

    def score(self, owners: list[data.Example], completions: list[Completion], state: TrainerState,
              episodes: list[Episode] | None = None, first: int = 0) -> Scores:
        """(weighted sums, per-function scores, what the functions logged) for TRL-style calls, the
        environment's ``get_reward`` columns added; ``episodes[first:]``: each completion's episode."""
        totals, per_fn, logged = score_completions(
            self.rewards, owners, completions, state, self.config.generation.max_completion_length,
            environments=environments.instances(episodes, first), with_tools=bool(self.tools or self.environment),
            warn=self.warn)
        totals, per_fn = environments.add_rewards(self.environment, episodes, first, totals, per_fn, self.warn)
        return totals, per_fn, logged

    def judge_seconds(self) -> float | None:
        """The judges' time since the last call (None without a judge)."""
        return judge.take_seconds(self.rewards)

    def follow(self, keys: list[str]) -> None:
        """The config now holds live changes of ``keys``: the reward weights follow."""
        for reward, config in zip(self.rewards, self.config.rewards):
            reward.weight = config.weight
