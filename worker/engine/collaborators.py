"""The step's collaborators as one typed value (docs/architecture.md, "The step's spine"): the run's
prompts, the policy that samples, the scorer, the learner, the ranks and, with ``[environment]
rollout_func``, TRL's rollout function. ``engine.trainer.Trainer`` builds them once; the step and
its helpers (``scored_round``, ``generation_reuse``, ``rollout_func``) take what they use from here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from grpo_tui.protocol.config import Config
from grpo_tui.protocol.messages import LogLevel
from grpo_tui.worker.engine.distributed import Ranks
from grpo_tui.worker.engine.learning.learner import Learner
from grpo_tui.worker.engine.policy.policy import Policy
from grpo_tui.worker.engine.policy.rollout_func import RolloutFunction
from grpo_tui.worker.engine.prompts.run_prompts import RunPrompts
from grpo_tui.worker.engine.scoring.reward_call import TrainerState
from grpo_tui.worker.engine.scoring.scorer import Scorer


@dataclass(frozen=True)
class Collaborators:
    config: Config  # the run's effective config, shared by all: live changes land in it
    prompts: RunPrompts
    policy: Policy
    scorer: Scorer
    learner: Learner
    ranks: Ranks
    rollout_function: RolloutFunction | None
    log: Callable[[LogLevel, str], None]

    def state(self, step: int) -> TrainerState:
        """TRL's ``trainer.state`` while ``step`` is scored (reward functions read it)."""
        p = self.prompts
        return TrainerState.before_step(step, p.steps_per_epoch, p.total_steps, p.num_epochs)

    def begin_step(self, step: int) -> None:
        """What every step starts with, before its rollout (``stepwise.Engine.generate``'s too)."""
        import mlx.core as mx

        self.policy.seed(step)
        mx.reset_peak_memory()
        self.ranks.start_step()
        self.scorer.judge_seconds()  # an evaluation's judging since the last step is not this step's
