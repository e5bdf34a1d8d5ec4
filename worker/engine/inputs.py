"""The user's files of a run, read before MLX loads so that their mistakes are said at once (README,
"When something goes wrong"): the ``[[tools]]`` (their schemas reach the chat template of every row without
a ``tools`` column of its own), the data and its eval set with their columns and formats, and the
reward functions. No MLX here: the worker reads these before it imports the trainer (a judge reward
loads its model, and MLX with it)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from grpo_tui.protocol.config import Config
from grpo_tui.worker.engine.prompts import data, reasoning_gym_source
from grpo_tui.worker.engine.scoring import tools as agent_tools
from grpo_tui.worker.engine.policy.rollout_func import RolloutFunction
from grpo_tui.worker.engine.scoring.environments import Environments
from grpo_tui.worker.engine.scoring.rewards import Reward, check_arguments, load_rewards


@dataclass
class Inputs:
    tools: list[agent_tools.Tool]
    dataset: list[data.Example]
    dataset_hash: str
    eval_dataset: list[data.Example] | None
    eval_label: str  # how errors name the eval set
    rewards: list[Reward]
    environment: Any = None  # environments.Environment, with [environment] class(es)
    rollout_func: Any = None  # rollout_func.RolloutFunction, with [environment] rollout_func


def load_inputs(config: Config) -> Inputs:
    tools = agent_tools.load_tools(config.tools)
    schemas = [t.schema for t in tools] or None
    env = config.environment
    function = RolloutFunction(env.rollout_func) if env is not None and env.rollout_func is not None else None
    environment = Environments(env, config.generation.enable_thinking) if env is not None and function is None else None
    d = config.data
    for i, reward in enumerate(config.rewards):  # before any data is read, as grpo-tui check says it
        if reward.name == "reasoning_gym" and d.reasoning_gym is None:
            reasoning_gym_source.require(f"rewards[{i}] (reasoning_gym)")
    if d.reasoning_gym is not None:  # rows generated here, not read (reasoning_gym_source)
        levels = config.curriculum.levels if config.curriculum.strategy == "levels" else 0
        rows, dataset_hash = reasoning_gym_source.build(d.reasoning_gym, d.prompt_column, levels=levels)
        dataset = data.examples_of(rows, d, d.label, default_tools=schemas)
        eval_label = "data.reasoning_gym (eval_seed)"
        eval_dataset = None
        if d.reasoning_gym.eval_size:
            eval_dataset = data.examples_of(reasoning_gym_source.build(d.reasoning_gym, d.prompt_column, held_out=True)[0], d,
                                            eval_label, default_tools=schemas)
        if environment is not None:
            environment.check_rows(dataset, d.label)
        rewards = load_rewards(config.rewards)
        if function is None:  # a rollout function's extra keys are columns too: its first return says
            check_arguments(rewards, {k for ex in dataset for k in ex.columns}, d.label)
        return Inputs(tools, dataset, dataset_hash, eval_dataset, eval_label, rewards, environment, function)
    dataset, dataset_hash = data.read_dataset(d.path, d, default_tools=schemas)
    data.check_columns(dataset, d, config.rewards, d.path)
    if environment is not None:
        environment.check_rows(dataset, d.path)
    eval_dataset = None
    eval_label = d.eval_path or f"{d.path} ({d.eval_split})"
    if d.eval_path or d.eval_split:
        eval_dataset = data.read_dataset(d.eval_path or d.path, d, split=d.eval_split, default_tools=schemas)[0]
        data.check_columns(eval_dataset, d, config.rewards, eval_label)
        data.check_same_format(dataset, d.path, eval_dataset, eval_label)
        if environment is not None:
            environment.check_rows(eval_dataset, eval_label)
    rewards = load_rewards(config.rewards)
    if function is None:
        check_arguments(rewards, {k for ex in dataset for k in ex.columns}, d.path)
    return Inputs(tools, dataset, dataset_hash, eval_dataset, eval_label, rewards, environment, function)
