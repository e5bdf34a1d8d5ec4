"""The policy: the model that samples, its tokenizer, the engine plan and the compiled decode step
(docs/architecture.md, "The step's spine"). Prompts in, completions out; the learner trains the same
weights (``model`` is one object, shared), and TRL's rollout function and the HTTP endpoint generate
through it.
"""

from __future__ import annotations

from typing import Any, Callable

import mlx.core as mx
import mlx.nn as nn

from grpo_tui.protocol.config import Config, GenerationConfig
from grpo_tui.protocol.messages import LogLevel
from grpo_tui.worker.engine.accel import fastgen
from grpo_tui.worker.engine.models import model_source
from grpo_tui.worker.engine.models.plan import EnginePlan
from grpo_tui.worker.engine.policy import agent, rollout, sampling
from grpo_tui.worker.engine.policy.rollout import Completion
from grpo_tui.worker.engine.prompts import data
from grpo_tui.worker.engine.scoring.tools import RowTools, Tool


class Policy:
    """Sampling from the model being trained: ``roll_out`` a step's groups, ``generate`` any rows."""

    def __init__(self, config: Config, name: str, model: nn.Module, tokenizer: Any, plan: EnginePlan, tools: list[Tool],
                 rank: int, log: Callable[[LogLevel, str], None]) -> None:
        self.config = config  # the run's effective config, shared: live changes are read from it
        self.name = name  # what the log, the endpoint's /v1/models and the dashboard call the model
        self.model = model
        self.tokenizer = tokenizer
        self.plan = plan
        self.tools = tools  # [[tools]]: a row of every rollout may call them (agent rollouts)
        self.rank = rank
        self.log = log
        self.decode = fastgen.DecodeStep(model) if plan.fast_rollout else None
        # [async]'s generator keeps each sampled token's log-probability for the learner's correction
        self.keep_logprobs = False

    def seed(self, step: int) -> None:
        """Only mlx-lm's BatchGenerator path draws from this stream (see sampling.py)."""
        mx.random.seed((self.config.training.seed * 1_000_003 + step + 7919 * self.rank) % 2**32)

    def keys(self, step: int, positions: list[int]) -> list[int]:
        """The sampling keys of step ``step``'s groups at ``positions`` (each prompt's place in the step):
        a row's draws depend on them alone, not on its batch, the rank count or a resume."""
        return sampling.step_keys(self.config.training.seed, step, positions, self.config.grpo.group_size)

    def roll_out(self, step: int, prompts: list[list[int]], positions: list[int],
                 row_tools: list[RowTools] | None = None) -> list[Completion]:
        """Step ``step``'s ``group_size`` completions of each prompt at ``positions`` in the step."""
        return self.generate(prompts, self.config.grpo.group_size, keys=self.keys(step, positions), row_tools=row_tools)

    def generate(self, prompts: list[list[int]], n: int, greedy: bool = False, keys: list[int] | None = None,
                 row_tools: list[RowTools] | None = None) -> list[Completion]:
        """``n`` completions per prompt; ``keys`` (sampling.step_keys) make a row's tokens independent
        of its batch, agent rollouts' included (each row draws at its own position)."""
        self.model.eval()  # no LoRA dropout while sampling
        if self.tools or row_tools:
            return agent.generate(self.model, self.tokenizer, prompts, n, self.config.generation, self.tools,
                                  greedy=greedy, plan=self.plan, decode=self.decode, keys=keys, row_tools=row_tools)
        return self.sample(prompts, n, self.config.generation, greedy=greedy, keys=keys, logprobs=self.keep_logprobs)

    def sample(self, prompts: list[list[int]], n: int, generation: GenerationConfig, *, greedy: bool = False,
               keys: list[int] | None = None, logprobs: bool = False) -> list[Completion]:
        """Plain completions (no tools) with ``generation``'s settings, the run's or a request's
        (TRL's rollout function, the endpoint); ``logprobs``: each token's log-probability too."""
        self.model.eval()
        return rollout.generate(self.model, self.tokenizer, prompts, n, generation, greedy=greedy, logprobs=logprobs,
                                plan=self.plan, decode=self.decode, keys=keys)

    # ------------------------------------------------------------ live changes (docs/steering.md)

    def live_problem(self, key: str, value: Any, prompts: list[data.Example]) -> str | None:
        """Why the loaded model cannot take ``key`` = ``value`` (None: it can); ``prompts``: every
        prompt the run may generate for (the longest must still fit)."""
        if key == "generation.max_completion_length":
            context = model_source.context_length(self.config.model.path)
            longest = max(len(e.prompt_ids) for e in prompts)
            if context is not None and longest + value > context:
                return (f"{value} with the longest prompt ({longest} tokens) overflows the model's context "
                        f"({context} positions); at most {context - longest}")
        return None

    def follow(self, keys: list[str]) -> None:
        """The config now holds live changes of ``keys``: a new completion length needs a new decode step."""
        if self.decode is not None and "generation.max_completion_length" in keys:
            self.decode = fastgen.DecodeStep(self.model)
