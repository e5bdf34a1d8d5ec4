"""The run's files that ``GRPOTrainer`` writes before the worker starts (docs/python-api.md): the
``config.toml`` that ``grpo-tui run`` / ``worker`` / ``check`` take as it is, with the datasets as
JSONL or Parquet and the reward functions, tools and rollout function pickled beside it
(``inputs.py``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from grpo_tui.common.tomlout import dumps
from grpo_tui.config import GRPOConfig, trl_name
from grpo_tui.errors import TrainingError
from grpo_tui.inputs import Dataset, dataset_file, environment_table, local_or_hub, lora_table, with_pickles, with_prompts
from grpo_tui.protocol.config import ConfigError, load_config

# The keys train() fills from the trainer's own arguments: a mistake there names the argument
_ARGUMENT_KEYS = {"model.path": "model", "data.path": "train_dataset", "data.eval_path": "eval_dataset",
                  "checkpoint.resume": "resume_from_checkpoint"}
CONFIG_FILE = "config.toml"  # what train() writes into output_dir: `grpo-tui run` opens it too
REWARDS_FILE = "rewards.pkl"
TOOLS_FILE = "tools.pkl"
ROLLOUT_FILE = "rollout_func.pkl"


def write_run_config(args: GRPOConfig, out: Path, resume: str | bool, *, model: str, peft_config: Any,
                     train_dataset: Dataset, eval_dataset: Dataset, environment_factory: Any, rollout_func: Any,
                     rewards: list[dict[str, Any]], tools: list[Any]) -> Path:
    """Write the run's inputs into ``out`` and return its ``config.toml``; a mistake names the
    GRPOConfig field or the trainer's argument."""
    out.mkdir(parents=True, exist_ok=True)
    raw = args.to_dict()
    raw["checkpoint"] = {**raw.get("checkpoint", {}), "output_dir": str(out), "resume": resume}
    raw["model"] = {**raw.get("model", {}), "path": local_or_hub(model)}
    if peft_config is not None:
        raw["model"]["lora"] = {**raw["model"].get("lora", {}), **lora_table(peft_config, raw["model"]["path"])}
    data = dict(raw.get("data", {}))
    if train_dataset is not None:
        data["path"] = dataset_file(with_prompts(train_dataset) if environment_factory is not None
                                    else train_dataset, out / "train.jsonl", "train_dataset")
    if eval_dataset is not None:
        data["eval_path"] = dataset_file(eval_dataset, out / "eval.jsonl", "eval_dataset")
        if args.evaluates_while_training():
            raw.setdefault("eval", {})
        else:  # eval_strategy="no": as TRL, only evaluate() evaluates
            raw.pop("eval", None)
    if environment_factory is not None:
        raw["environment"] = environment_table(environment_factory, out)
        if "path" not in data:  # TRL's environment-owned data: reset() writes each prompt
            data["path"] = dataset_file([{"prompt": [{"role": "user", "content": ""}]}] * 64, out / "train.jsonl",
                                        "train_dataset")
    if rollout_func is not None:
        raw["environment"] = {"rollout_func": with_pickles([{"function": rollout_func}], out / ROLLOUT_FILE, "rollout_func")[0]["function"]}
    if "path" not in data:
        raise TrainingError("train_dataset: give a datasets.Dataset, a pandas DataFrame, a list of dicts or a path")
    raw["data"] = data
    if rewards:
        raw["rewards"] = with_pickles(rewards, out / REWARDS_FILE, "reward_funcs")
    if args.reward_weights is not None:
        if len(args.reward_weights) != len(raw["rewards"]):
            raise TrainingError(
                f"reward_weights: {len(args.reward_weights)} weights for {len(raw['rewards'])} reward functions"
            )
        for table, weight in zip(raw["rewards"], args.reward_weights):
            table["weight"] = float(weight)
    if tools:
        tables = [{"function": t} for t in tools]
        raw["tools"] = with_pickles(tables, out / TOOLS_FILE, "tools", keep_names=True)
    path = out / CONFIG_FILE
    text = "# Written by grpo_tui.GRPOTrainer; `grpo-tui run` and `grpo-tui check` take it as it is.\n" + dumps(raw)
    path.write_text(text, encoding="utf-8")
    try:
        config = load_config(path)
    except ConfigError as exc:  # name the GRPOConfig field when one stands for the key
        name = _ARGUMENT_KEYS.get(exc.key or "") or trl_name(exc.key or "")
        raise TrainingError(f"{name}: {exc.detail}" if exc.key else str(exc)) from None
    from grpo_tui.protocol.outcome import Mistake
    from grpo_tui.worker.trackers import check_installed

    try:
        check_installed(config)  # here, not minutes later in the worker, with the pip command
    except Mistake as exc:
        raise TrainingError(str(exc)) from None
    return path
