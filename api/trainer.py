"""``GRPOTrainer``: TRL's trainer interface over grpo-tui's worker.

``train()`` writes the run's inputs into ``args.output_dir`` (``config.toml``, the datasets as
JSONL or Parquet, the reward functions and tools pickled with cloudpickle: ``inputs.py``), then runs
the same worker process as ``grpo-tui worker`` (or ``grpo-tui run``, with ``dashboard=True``) and
follows its frames (``follow.py``; the callbacks' events: ``callbacks.py``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from grpo_tui.callbacks import CallbackHandler
from grpo_tui.common.last_frame import silent_death
from grpo_tui.config import GRPOConfig
from grpo_tui.errors import TrainingError
from grpo_tui.follow import Follower, replay, run_worker, worker_env
from grpo_tui.inputs import Dataset, check_processing_class, check_rollout_func, local_or_hub, refuse_unsupported, reward_table
from grpo_tui.live_settings import LiveLink
from grpo_tui.run_files import write_run_config
from grpo_tui.protocol.config import Config
from grpo_tui.protocol.layout import (FINAL_DIR, OPTIMIZER_FILE, RUN_LOG_FILE, STATE_FILE, STORE_FILE,
                                      parse_checkpoint_dir_name)
from grpo_tui.protocol.outcome import Exit



@dataclasses.dataclass
class TrainerState:
    """What transformers' ``TrainerState`` offers: ``global_step``, ``max_steps``, ``epoch`` and
    ``log_history``, a list of dicts under TRL's metric names (``loss``, ``reward``,
    ``rewards/<name>/mean``, ``kl``, ``completions/mean_length``, ..., ``eval_reward``, with
    ``step`` and ``epoch``), one every ``logging_steps`` steps; it goes on across a resume, in a
    new process too (read back from the run's ``run.jsonl``)."""

    global_step: int = 0
    max_steps: int = 0
    epoch: float = 0.0
    num_train_epochs: int = 0
    log_history: list[dict[str, Any]] = dataclasses.field(default_factory=list)  # metrics; a live change: its key and values
    last_checkpoint: str | None = None  # the newest checkpoint folder the run saved
    logging_steps: float = 500
    eval_steps: float = 500
    save_steps: float = 500
    train_batch_size: int | None = None
    num_input_tokens_seen: int = 0
    total_flos: float = 0.0
    best_metric: float | None = None
    best_global_step: int | None = None
    best_model_checkpoint: str | None = None
    is_local_process_zero: bool = True
    is_world_process_zero: bool = True
    is_hyper_param_search: bool = False
    trial_name: str | None = None
    trial_params: dict[str, Any] | None = None
    stateful_callbacks: list[Any] = dataclasses.field(default_factory=list)


class TrainOutput(NamedTuple):
    """What ``train()`` returns, as TRL's."""

    global_step: int
    training_loss: float
    metrics: dict[str, float]


class _Accelerator:
    """``trainer.accelerator`` as TRL's scripts use it: one process, the main one."""

    is_main_process = is_local_main_process = True
    num_processes = 1
    process_index = 0

    def print(self, *args: Any, **kwargs: Any) -> None:
        print(*args, **kwargs)

    def wait_for_everyone(self) -> None:
        pass


class GRPOTrainer:
    """Train a model with GRPO on MLX, the way TRL's ``GRPOTrainer`` is called (its arguments, in
    its order).

    Args:
        model: a local mlx-lm model folder or a Hugging Face id (``"Qwen/Qwen3-0.6B"``); None takes
            ``model.path`` of a config read with ``GRPOConfig.from_toml``.
        reward_funcs: one or a list of: a function called as TRL calls reward functions
            (``prompts``, ``completions``, every dataset column as keyword arguments; returns a list
            of floats or ``None``), defined anywhere, a notebook cell or a closure included; the name
            of a built-in (``"accuracy"``, ``"xml_format"``, ``"length"``, ``"tool_use"``,
            ``"json_schema"``, ``"soft_overlong"``); ``"file.py:func"``; or a ``[[rewards]]`` table as a dict
            (``{"name": "json_schema", "params": {"schema": ...}}``). None keeps the ``[[rewards]]``
            of a config read with ``GRPOConfig.from_toml``.
        args: a ``GRPOConfig`` (TRL's defaults when omitted).
        train_dataset: a ``datasets.Dataset``, a pandas ``DataFrame``, a list of dicts (``prompt``
            and any columns the rewards read), or a path / hub dataset id as ``data.path`` takes it.
        eval_dataset: the same kinds, evaluated every ``args.eval_steps`` steps and by ``evaluate()``.
        processing_class: the model's tokenizer (or its path): the worker uses the model folder's.
        reward_processing_classes: for reward models, which are not run here: accepted, unused.
        callbacks: ``transformers.TrainerCallback`` subclasses or instances (``callbacks.py``).
        optimizers: ``(None, None)`` only: the worker builds AdamW from ``args``.
        peft_config: LoRA instead of full fine-tuning: a ``peft.LoraConfig`` or a dict with its names
            (``r``, ``lora_alpha``, ``lora_dropout``, ``target_modules``, ``task_type``) or ``[model.lora]``'s.
        tools: functions the model may call during its rollouts (typed, with a Google-style
            docstring: they make the tool's JSON schema), or ``"file.py:func"`` strings.
        environment_factory: TRL's: a class (or ``"env.py:Name"``) built once per rollout, reset
            with the row, its public methods the tools, its optional ``get_reward`` a reward
            column (docs/environments.md). Without ``train_dataset`` the rows are empty prompts
            that ``reset`` fills, as TRL's environment-owned data.
        rollout_func: TRL's ``rollout_func(prompts, trainer)`` (or ``"file.py:func"``), generating with
            ``grpo_tui.generate_rollout_completions`` and returning TRL's dict (docs/environments.md).
        environment: a verifiers environment: refused, one sentence says why (docs/environments.md).

    Example::

        def short(completions, **kwargs):
            return [-len(c) / 100 for c in completions]

        trainer = GRPOTrainer(model="Qwen/Qwen3-0.6B", reward_funcs=[short, "accuracy"],
                              args=GRPOConfig(output_dir="runs/short", max_steps=50),
                              train_dataset=[{"prompt": "2 + 2 =", "answer": "4"}, ...])
        trainer.train()                      # a progress bar; train(dashboard=True) in a terminal
        trainer.state.log_history[-1]        # TRL's metric names
        trainer.save_model("short-model")    # loads with mlx_lm.load("short-model")
    """

    def __init__(
        self,
        model: str | os.PathLike[str] | None,
        reward_funcs: Any = None,
        args: GRPOConfig | None = None,
        train_dataset: Dataset = None,
        eval_dataset: Dataset = None,
        processing_class: Any = None,
        reward_processing_classes: Any = None,
        callbacks: Sequence[Any] | None = None,
        optimizers: tuple[Any, Any] = (None, None),
        peft_config: Any = None,
        tools: Sequence[Callable[..., Any] | str] | None = None,
        environment_factory: Any = None,
        quantization_config: Any = None,
        rollout_func: Callable[..., Any] | str | None = None,
        environment: Any = None,
    ) -> None:
        self.args = _checked_args(args)
        if model is None and "path" in self.args.extra.get("model", {}):  # a config read with from_toml
            model = self.args.extra["model"]["path"]
        if not isinstance(model, (str, os.PathLike)):
            raise TrainingError(
                f"model: {type(model).__name__} — pass a model folder or a Hugging Face id; the worker loads it with MLX"
            )
        self.model = str(model)
        self.reward_funcs = ([] if reward_funcs is None else list(reward_funcs) if isinstance(reward_funcs, (list, tuple))
                             else [reward_funcs])
        self.train_dataset = train_dataset
        self.eval_dataset = eval_dataset
        self.processing_class = processing_class
        check_processing_class(processing_class, local_or_hub(self.model))
        self.reward_processing_classes = reward_processing_classes  # only reward models read them
        refuse_unsupported(optimizers, quantization_config, environment)
        self.peft_config = peft_config
        self.tools = list(tools or [])
        self.environment_factory = environment_factory
        self.rollout_func = check_rollout_func(rollout_func, environment_factory)
        self.callbacks = list(callbacks or [])
        self.accelerator = _Accelerator()
        self._live = LiveLink()
        self.state = TrainerState()
        self.output_dir = Path(self.args.output_dir or "trainer_output").expanduser().resolve()
        self._rewards = [reward_table(r, i) for i, r in enumerate(self.reward_funcs)]
        if not self._rewards and not self.args.extra.get("rewards") and environment_factory is None:
            raise TrainingError("reward_funcs: give at least one reward function or built-in name")
        for i, tool in enumerate(self.tools):
            if not (callable(tool) or isinstance(tool, str)):
                raise TrainingError(f"tools[{i}]: {type(tool).__name__} is not a function or a 'file.py:func' string")
        self.callback_handler = CallbackHandler(self.callbacks, self)
        self.callback_handler.call("on_init_end")

    # ------------------------------------------------------------ the run's files

    def write_config(self, resume: str | bool = False) -> Path:
        """Write the run's inputs into ``args.output_dir`` and return its ``config.toml``, which
        ``grpo-tui run`` / ``worker`` / ``check`` take as it is (``train()`` calls this)."""
        return write_run_config(self.args, self.output_dir, resume, model=self.model, peft_config=self.peft_config,
                                train_dataset=self.train_dataset, eval_dataset=self.eval_dataset,
                                environment_factory=self.environment_factory, rollout_func=self.rollout_func,
                                rewards=self._rewards, tools=self.tools)

    # ------------------------------------------------------------ training

    def train(self, resume_from_checkpoint: str | bool | None = None, trial: Any = None,
              ignore_keys_for_eval: Any = None, *, dashboard: bool = False) -> TrainOutput:
        """Train in the worker process, as ``grpo-tui worker`` does; returns ``TrainOutput``.

        Args:
            resume_from_checkpoint: as in TRL: ``None`` starts fresh (earlier checkpoints in
                ``output_dir`` are moved aside into ``previous-<time>/``, never deleted), ``True``
                continues from the newest checkpoint in ``output_dir`` (none there: a
                ``TrainingError``), a path from that checkpoint.
            dashboard: open the full-screen dashboard in this terminal (``grpo-tui run``) instead
                of the progress bar; without a terminal (a notebook) the progress bar is used.

        A run that ends early raises ``TrainingError`` with the worker's own message (a fixable
        mistake names the key, file or function). Ctrl-C stops the run after a checkpoint that
        ``train(resume_from_checkpoint=True)`` continues from, then raises ``KeyboardInterrupt``.
        """
        if trial is not None:
            raise TrainingError("trial: hyperparameter search is not supported here")
        if resume_from_checkpoint is True and self._newest_checkpoint() is None:
            raise TrainingError(f"resume_from_checkpoint=True: no checkpoint in {self.output_dir} to resume from")
        resume: str | bool = (
            False if resume_from_checkpoint in (None, False)
            else "latest" if resume_from_checkpoint is True
            else str(Path(str(resume_from_checkpoint)).expanduser().resolve())
        )  # fmt: skip
        config_path = self.write_config(resume)
        for warning in self._warnings():  # the ignored TRL options, once per run
            print(f"grpo-tui: [warning] {warning}", file=sys.stderr)
        log_file = self.output_dir / RUN_LOG_FILE
        offset = log_file.stat().st_size if log_file.exists() else 0
        self.state.logging_steps = self.args.logging_steps
        self.state.save_steps, self.state.eval_steps = self.args.save_steps, self.args.eval_steps or self.args.logging_steps
        if resume and offset:  # the history so far, from this run's own record (a new process knows none)
            self.state.log_history.clear()
            replay(self.state, int(self.args.logging_steps), log_file, offset, first_step=self.args.logging_first_step)
        if dashboard and not (sys.stdin.isatty() and sys.stdout.isatty()):
            print("grpo-tui: dashboard=True needs a terminal; showing a progress bar instead", file=sys.stderr)
            dashboard = False
        handler = self.callback_handler if self.callbacks else None
        follower = Follower(self.state, int(self.args.logging_steps), self._live, handler,
                            barrier=handler is not None and not dashboard, completions=_completions_printer(self.args, self.output_dir),
                            first_step=self.args.logging_first_step, progress=not self.args.disable_tqdm)
        if handler is not None:
            handler.control._new_training()
        if dashboard:
            code = subprocess.call(
                [sys.executable, "-m", "grpo_tui.tui.cli", "run", str(config_path)], env=worker_env()
            )
            with open(log_file, "rb") as f:
                f.seek(offset)
                for line in f:
                    follower.feed(line)
        else:
            code = run_worker(config_path, follower, self._live)
        follower.close()
        if follower.callback_error is not None:
            raise follower.callback_error
        if not dashboard and follower.complete is None and follower.error is None:
            # its exit code is believed only with its last frame (common/last_frame.py)
            raise TrainingError(silent_death(code, [], log_file, offset), Exit.CRASH)
        if code == Exit.STOPPED and follower.stop_requested and follower.complete is not None:
            code = 0  # control.should_training_stop: ended as asked, after its checkpoint
        if code != 0 and not (dashboard and follower.complete is not None):
            raise TrainingError(follower.error or f"the worker exited with status {code}", code)
        metrics = follower.summary()
        if handler is not None:
            handler.call("on_train_end")
        return TrainOutput(self.state.global_step, metrics.get("train_loss", float("nan")), metrics)

    def _warnings(self) -> list[str]:
        lines = self.args.warnings()
        if self.reward_processing_classes is not None:
            lines.append("reward_processing_classes is ignored: it serves reward models, which do not run here")
        return lines

    def evaluate(self, eval_dataset: Dataset = None, ignore_keys: Any = None,
                 metric_key_prefix: str = "eval") -> dict[str, float]:
        """Evaluate the trained model (its newest checkpoint; the base model before ``train()``) on
        ``eval_dataset`` (default: the trainer's), as the run's ``[eval]`` evaluates, in a worker
        process; returns TRL's ``eval_*`` metrics, also appended to ``log_history``."""
        dataset = eval_dataset if eval_dataset is not None else self.eval_dataset
        if dataset is None:
            raise TrainingError("evaluate: give an eval_dataset (here or to GRPOTrainer)")
        saved = self.eval_dataset
        self.eval_dataset = dataset
        try:
            config_path = self.write_config(False)
        finally:
            self.eval_dataset = saved
        checkpoint = self._newest_checkpoint()
        metrics = _evaluate_in_worker(config_path, checkpoint, metric_key_prefix)
        entry = {**metrics, "epoch": round(self.state.epoch, 4), "step": self.state.global_step}
        self.state.log_history.append(entry)
        if self.callbacks:
            self.callback_handler.call("on_evaluate", metrics=entry)
        return metrics

    def set(self, key: str, value: Any) -> int | None:
        """Change a setting of the running run from its next step on (docs/steering.md), as
        ``grpo-tui set`` does: ``trainer.set("training.learning_rate", 5e-6)`` from another thread
        while ``train()`` runs returns the step it applies from, or raises ``ValueError`` with the
        sentence (a bad value, a key that cannot change live); from a callback it returns None at
        once and the change applies from the next step."""
        return self._live.set(key, value)

    def save_model(self, output_dir: str | os.PathLike[str] | None = None) -> Path:
        """Save the trained model (weights, config, tokenizer; adapters with LoRA) to
        ``output_dir`` (default ``args.output_dir``), loadable with ``mlx_lm.load``: the run's
        ``final/`` checkpoint, or its newest one, without the optimizer and training state."""
        source = self._newest_checkpoint()
        if source is None:
            raise TrainingError(f"no checkpoint in {self.output_dir}: call train() first")
        dest = Path(output_dir).expanduser() if output_dir is not None else self.output_dir
        dest.mkdir(parents=True, exist_ok=True)
        for item in source.iterdir():
            if item.name in (OPTIMIZER_FILE, STATE_FILE):
                continue
            target = dest / item.name
            if item.is_dir():
                shutil.copytree(item, target, dirs_exist_ok=True)
            else:
                shutil.copy2(item, target)
        return dest

    def push_to_hub(self, *args: Any, **kwargs: Any) -> None:
        """grpo-tui is offline: says how to upload instead."""
        print(f"grpo-tui: [warning] push_to_hub uploads nothing (offline); upload {self.output_dir} with "
              f"`hf upload <repo-id> {self.output_dir}`", file=sys.stderr)

    def _newest_checkpoint(self) -> Path | None:
        if (self.output_dir / FINAL_DIR / STATE_FILE).exists():
            return self.output_dir / FINAL_DIR
        found = []
        for path in self.output_dir.glob("checkpoint-*"):
            kind = parse_checkpoint_dir_name(path.name)
            if kind is not None and kind[1] is not None and (path / STATE_FILE).exists():
                found.append((kind[1], path))
        return max(found)[1] if found else None


def _checked_args(args: Any) -> GRPOConfig:
    if args is not None and not isinstance(args, GRPOConfig):  # a dict, or trl's own GRPOConfig left imported
        kind = type(args)
        raise TrainingError(f"args: {kind.__module__}.{kind.__qualname__} is not grpo_tui's GRPOConfig; build it "
                            "with `from grpo_tui import GRPOConfig` (TRL's fields), e.g. GRPOConfig(**fields)")
    return args if args is not None else GRPOConfig()


def _completions_printer(args: GRPOConfig, output_dir: Path) -> Callable[[int], None] | None:
    """log_completions: the step's table, from the run's store."""
    if not args.log_completions:
        return None
    from grpo_tui.completions_table import print_completions

    def show(step: int) -> None:
        run_id = _latest_run(output_dir / STORE_FILE)
        if run_id is not None:
            print_completions(output_dir / STORE_FILE, run_id, step, args.num_completions_to_print)

    return show


def _latest_run(db: Path) -> int | None:
    import sqlite3

    if not db.exists():
        return None
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5) as conn:
        row = conn.execute("SELECT max(id) FROM runs").fetchone()
    return row[0] if row else None


_EVALUATE = """
import json, sys
from grpo_tui import Engine
from grpo_tui.common.trl_names import eval_metrics
config, checkpoint = sys.argv[1], sys.argv[2]
with Engine(config) as engine:
    if checkpoint:
        engine.load(checkpoint)
    e = engine.config.eval
    result = engine.evaluate(limit=e.limit if e else 0, greedy=e.greedy if e else True,
                             num_samples=e.num_samples if e else 1)
print("GRPO_TUI_EVAL " + json.dumps(eval_metrics(result)))
"""


def _evaluate_in_worker(config_path: Path, checkpoint: Path | None, prefix: str) -> dict[str, float]:
    """``Engine.evaluate`` in a child process (MLX stays out of this one)."""
    done = subprocess.run([sys.executable, "-c", _EVALUATE, str(config_path), str(checkpoint or "")],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=worker_env(), text=True)
    for line in done.stdout.splitlines():
        if line.startswith("GRPO_TUI_EVAL "):
            return {f"{prefix}_{k}": v for k, v in json.loads(line.split(" ", 1)[1]).items()}
    tail = done.stderr.strip().splitlines()[-1:] or [f"status {done.returncode}"]
    raise TrainingError(f"evaluate: the evaluation failed ({tail[0]})", done.returncode or Exit.CRASH)


__all__ = ["GRPOTrainer", "TrainerState", "TrainOutput", "TrainingError", "Config"]
