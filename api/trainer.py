"""``GRPOTrainer``: TRL's trainer interface over grpo-tui's worker.

``train()`` writes the run's inputs into ``args.output_dir`` (``config.toml``, the datasets as
JSONL, the reward functions and tools pickled with cloudpickle), then runs the same worker process
as ``grpo-tui worker`` (or ``grpo-tui run``, with ``dashboard=True``) and follows its frames.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import IO, Any, NamedTuple

from grpo_tui.common.last_words import silent_death
from grpo_tui.common.tomlout import dumps
from grpo_tui.common.trl_names import StepWindow, eval_metrics
from grpo_tui.config import GRPOConfig, trl_name
from grpo_tui.errors import TrainingError
from grpo_tui.live import LiveLink
from grpo_tui.protocol import messages as m
from grpo_tui.protocol.codec import ProtocolError, decode_event, encode
from grpo_tui.protocol.config import BUILTIN_REWARDS, Config, ConfigError, load_config
from grpo_tui.protocol.layout import FINAL_DIR, OPTIMIZER_FILE, RUN_LOG_FILE, STATE_FILE, parse_checkpoint_dir_name
from grpo_tui.protocol.outcome import Exit

CONFIG_FILE = "config.toml"  # what train() writes into output_dir: `grpo-tui run` opens it too
REWARDS_FILE = "rewards.pkl"
TOOLS_FILE = "tools.pkl"


@dataclasses.dataclass
class TrainerState:
    """What TRL's ``trainer.state`` offers: ``global_step``, ``max_steps``, ``epoch`` and
    ``log_history``, a list of dicts under TRL's metric names (``loss``, ``reward``,
    ``rewards/<name>/mean``, ``kl``, ``completions/mean_length``, ..., ``eval_reward``, with
    ``step`` and ``epoch``), one every ``logging_steps`` steps."""

    global_step: int = 0
    max_steps: int = 0
    epoch: float = 0.0
    num_train_epochs: int = 0
    log_history: list[dict[str, Any]] = dataclasses.field(default_factory=list)  # metrics; a live change: its key and values
    last_checkpoint: str | None = None  # the newest checkpoint folder the run saved


class TrainOutput(NamedTuple):
    """What ``train()`` returns, as TRL's."""

    global_step: int
    training_loss: float
    metrics: dict[str, float]


Dataset = Any  # a datasets.Dataset, a list of dicts, or a path / hub id


class GRPOTrainer:
    """Train a model with GRPO on MLX, the way TRL's ``GRPOTrainer`` is called.

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
        args: a ``GRPOConfig`` (its defaults when omitted).
        train_dataset: a ``datasets.Dataset``, a list of dicts (``prompt`` and any columns the
            rewards read), or a path / hub dataset id as ``data.path`` takes it.
        eval_dataset: the same kinds, evaluated every ``args.eval_steps`` steps (and at start and end).
        peft_config: LoRA instead of full fine-tuning: a ``peft.LoraConfig`` or a dict with its names
            (``r``, ``lora_alpha``, ``lora_dropout``, ``target_modules``) or ``[model.lora]``'s.
        tools: functions the model may call during its rollouts (typed, with a Google-style
            docstring: they make the tool's JSON schema), or ``"file.py:func"`` strings.
        environment_factory: TRL's: a class (or ``"env.py:Name"``) built once per rollout, reset
            with the row, its public methods the tools, its optional ``get_reward`` a reward
            column (docs/environments.md). Without ``train_dataset`` the rows are empty prompts
            that ``reset`` fills, as TRL's environment-owned data.

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
        peft_config: Any = None,
        tools: Sequence[Callable[..., Any] | str] | None = None,
        callbacks: Sequence[Any] | None = None,
        environment_factory: Any = None,
    ) -> None:
        self.args = args if args is not None else GRPOConfig()
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
        self.peft_config = peft_config
        self.tools = list(tools or [])
        self.environment_factory = environment_factory
        self.callbacks = list(callbacks or [])  # TRL's: each one's on_step_end(args, state, control, trainer=...)
        self._live = LiveLink()
        self.state = TrainerState()
        self.output_dir = Path(self.args.output_dir or "trainer_output").expanduser().resolve()
        self._rewards = [_reward_table(r, i) for i, r in enumerate(self.reward_funcs)]
        if not self._rewards and not self.args.extra.get("rewards") and environment_factory is None:
            raise TrainingError("reward_funcs: give at least one reward function or built-in name")
        for i, tool in enumerate(self.tools):
            if not (callable(tool) or isinstance(tool, str)):
                raise TrainingError(f"tools[{i}]: {type(tool).__name__} is not a function or a 'file.py:func' string")

    # ------------------------------------------------------------ the run's files

    def write_config(self, resume: str | bool = False) -> Path:
        """Write the run's inputs into ``args.output_dir`` and return its ``config.toml``, which
        ``grpo-tui run`` / ``worker`` / ``check`` take as it is (``train()`` calls this)."""
        out = self.output_dir
        out.mkdir(parents=True, exist_ok=True)
        raw = self.args.to_dict()
        raw["checkpoint"] = {**raw.get("checkpoint", {}), "output_dir": str(out), "resume": resume}
        raw["model"] = {**raw.get("model", {}), "path": _local_or_hub(self.model)}
        if self.peft_config is not None:
            raw["model"]["lora"] = _lora_table(self.peft_config)
        data = dict(raw.get("data", {}))
        if self.train_dataset is not None:
            data["path"] = _dataset_file(self.train_dataset, out / "train.jsonl", "train_dataset")
        if self.eval_dataset is not None:
            data["eval_path"] = _dataset_file(self.eval_dataset, out / "eval.jsonl", "eval_dataset")
            if self.args.evaluates_while_training():
                raw.setdefault("eval", {})
            else:  # eval_strategy="no": as TRL, only evaluate() evaluates
                raw.pop("eval", None)
        if self.environment_factory is not None:
            raw["environment"] = _environment_table(self.environment_factory, out)
            if "path" not in data:  # TRL's environment-owned data: reset() writes each prompt
                data["path"] = _dataset_file([{"prompt": [{"role": "user", "content": ""}]}] * 64, out / "train.jsonl",
                                             "train_dataset")
        if "path" not in data:
            raise TrainingError("train_dataset: give a datasets.Dataset, a list of dicts or a path")
        raw["data"] = data
        if self._rewards:
            raw["rewards"] = _with_pickles(self._rewards, out / REWARDS_FILE, "reward_funcs")
        if self.args.reward_weights is not None:
            if len(self.args.reward_weights) != len(raw["rewards"]):
                raise TrainingError(
                    f"reward_weights: {len(self.args.reward_weights)} weights for {len(raw['rewards'])} reward functions"
                )
            for table, weight in zip(raw["rewards"], self.args.reward_weights):
                table["weight"] = float(weight)
        if self.tools:
            tables = [{"function": t} if isinstance(t, str) else {"function": t} for t in self.tools]
            raw["tools"] = _with_pickles(tables, out / TOOLS_FILE, "tools", keep_names=True)
        path = out / CONFIG_FILE
        text = "# Written by grpo_tui.GRPOTrainer; `grpo-tui run` and `grpo-tui check` take it as it is.\n" + dumps(raw)
        path.write_text(text, encoding="utf-8")
        try:
            config = load_config(path)
        except ConfigError as exc:  # name the GRPOConfig field when one stands for the key
            raise TrainingError(f"{trl_name(exc.key)}: {exc.detail}" if exc.key else str(exc)) from None
        from grpo_tui.protocol.outcome import Mistake
        from grpo_tui.worker.trackers import check_installed

        try:
            check_installed(config)  # here, not minutes later in the worker, with the pip command
        except Mistake as exc:
            raise TrainingError(str(exc)) from None
        return path

    # ------------------------------------------------------------ training

    def train(
        self, resume_from_checkpoint: str | bool | None = None, *, dashboard: bool = False
    ) -> TrainOutput:
        """Train in the worker process, as ``grpo-tui worker`` does; returns ``TrainOutput``.

        Args:
            resume_from_checkpoint: as in TRL: ``None`` starts fresh (earlier checkpoints in
                ``output_dir`` are moved aside into ``previous-<time>/``, never deleted), ``True``
                continues from the newest checkpoint in ``output_dir``, a path from that checkpoint.
            dashboard: open the full-screen dashboard in this terminal (``grpo-tui run``) instead
                of the progress bar; without a terminal (a notebook) the progress bar is used.

        A run that ends early raises ``TrainingError`` with the worker's own message (a fixable
        mistake names the key, file or function). Ctrl-C stops the run after a checkpoint that
        ``train(resume_from_checkpoint=True)`` continues from, then raises ``KeyboardInterrupt``.
        """
        resume: str | bool = (
            False if resume_from_checkpoint in (None, False)
            else "latest" if resume_from_checkpoint is True
            else str(Path(str(resume_from_checkpoint)).expanduser().resolve())
        )  # fmt: skip
        config_path = self.write_config(resume)
        for warning in self.args.warnings():  # the ignored TRL options, once per run
            print(f"grpo-tui: [warning] {warning}", file=sys.stderr)
        log_file = self.output_dir / RUN_LOG_FILE
        offset = log_file.stat().st_size if log_file.exists() else 0
        follower = _Follower(self.state, int(self.args.logging_steps), self._live, self._step_ended)
        if dashboard and not (sys.stdin.isatty() and sys.stdout.isatty()):
            print("grpo-tui: dashboard=True needs a terminal; showing a progress bar instead", file=sys.stderr)
            dashboard = False
        if dashboard:
            code = subprocess.call(
                [sys.executable, "-m", "grpo_tui.tui.cli", "run", str(config_path)], env=_worker_env()
            )
            with open(log_file, "rb") as f:
                f.seek(offset)
                for line in f:
                    follower.feed(line)
        else:
            code = _run_worker(config_path, follower, self._live)
        follower.close()
        if not dashboard and follower.complete is None and follower.error is None:
            # its exit code is believed only with its last frame (common/last_words.py)
            raise TrainingError(silent_death(code, [], log_file, offset), Exit.CRASH)
        if code != 0 and not (dashboard and follower.complete is not None):
            raise TrainingError(follower.error or f"the worker exited with status {code}", code)
        metrics = follower.summary()
        return TrainOutput(self.state.global_step, metrics.get("train_loss", float("nan")), metrics)

    def set(self, key: str, value: Any) -> int | None:
        """Change a setting of the running run from its next step on (docs/steering.md), as
        ``grpo-tui set`` does: ``trainer.set("training.learning_rate", 5e-6)`` from another thread
        while ``train()`` runs returns the step it applies from, or raises ``ValueError`` with the
        sentence (a bad value, a key that cannot change live); from a callback it returns None at
        once and the change applies after the running step."""
        return self._live.set(key, value)

    def _step_ended(self) -> None:
        for callback in self.callbacks:
            if (on_step_end := getattr(callback, "on_step_end", None)) is not None:
                on_step_end(self.args, self.state, None, trainer=self)

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

    def _newest_checkpoint(self) -> Path | None:
        if (self.output_dir / FINAL_DIR / STATE_FILE).exists():
            return self.output_dir / FINAL_DIR
        found = []
        for path in self.output_dir.glob("checkpoint-*"):
            kind = parse_checkpoint_dir_name(path.name)
            if kind is not None and kind[1] is not None and (path / STATE_FILE).exists():
                found.append((kind[1], path))
        return max(found)[1] if found else None


# ---------------------------------------------------------------- following the worker


class _Follower:
    """Turns the worker's frames into ``state``, ``log_history`` and the progress bar."""

    def __init__(self, state: TrainerState, logging_steps: int, live: LiveLink | None = None,
                 step_ended: Callable[[], None] = lambda: None) -> None:
        self.state = state
        self.live = live or LiveLink()
        self.step_ended = step_ended
        self.window = StepWindow(logging_steps)
        self.steps_per_epoch = 0
        self.error: str | None = None
        self.complete: m.Complete | None = None
        self.losses: list[float] = []
        self.bar: Any = None
        self.show = False
        self._greedy_eval_step: int | None = None  # the step of the last eval frame when it was greedy

    def feed(self, line: bytes) -> None:
        try:
            event = decode_event(line)
        except ProtocolError:
            return
        self.on_event(event)

    def on_event(self, event: m.Event) -> None:
        state = self.state
        if isinstance(event, m.Init):
            self.steps_per_epoch = max(event.steps_per_epoch, 1)
            state.max_steps, state.num_train_epochs = event.total_steps, event.num_epochs
            self.window.total = event.total_steps
            if self.show:
                from tqdm.auto import tqdm

                self.bar = tqdm(total=event.total_steps, initial=state.global_step, desc="GRPO", unit="step")
        elif isinstance(event, m.ResumeState):
            state.global_step = event.step
            if self.bar is not None:
                self.bar.n = event.step
                self.bar.refresh()
        elif isinstance(event, m.Step):
            state.global_step, state.epoch = event.step, event.step / (self.steps_per_epoch or 1)
            if event.loss is not None:
                self.losses.append(event.loss)
            entry = self.window.add(event)
            if entry is not None:
                state.log_history.append({**entry, "epoch": round(state.epoch, 4), "step": event.step})
            if self.bar is not None:
                self.bar.set_postfix(reward=_short(event.reward), loss=_short(event.loss), refresh=False)
                self.bar.update(event.step - self.bar.n)
            self.step_ended()
        elif isinstance(event, m.SettingChanged):
            state.log_history.append({"live_change": event.key, "old": event.old, "new": event.new,
                                      "source": event.source, "step": event.step})
            self.live.on_event(event)
        elif isinstance(event, m.SettingRefused):
            self._say(f"[warning] not changed: {event.message}")
            self.live.on_event(event)
        elif isinstance(event, m.Eval):
            # eval.also_sampled: the sampled pass follows the greedy one of its step; TRL's names stay the greedy's
            second = not event.greedy and self._greedy_eval_step == event.step
            self._greedy_eval_step = event.step if event.greedy else None
            prefix = "eval_sampled_" if second else "eval_"
            entry = {f"{prefix}{k}": v for k, v in eval_metrics(event).items()}
            state.log_history.append({**entry, "epoch": round(event.step / (self.steps_per_epoch or 1), 4),
                                      "step": event.step})
            self._say(f"eval at step {event.step}: reward {_short(event.reward)}"
                      + (f", accuracy {_short(event.accuracy)}" if event.accuracy is not None else ""))
        elif isinstance(event, m.Checkpoint):
            state.last_checkpoint = event.path
        elif isinstance(event, m.Log) and event.level in ("warning", "error"):
            self._say(f"[{event.level}] {event.message}")
        elif isinstance(event, m.Error):
            if event.fatal:
                self.error = event.message
            self._say(f"[{'fatal' if event.fatal else 'error'}] {event.message}")
        elif isinstance(event, m.Complete):
            self.complete = event

    def _say(self, text: str) -> None:
        if not self.show:
            return
        if self.bar is not None:
            self.bar.write(text, file=sys.stderr)
        else:
            print(text, file=sys.stderr)

    def summary(self) -> dict[str, float]:
        done = self.complete
        metrics: dict[str, float] = {}
        if done is not None:
            metrics["train_runtime"] = round(done.seconds, 4)
            metrics["train_steps_per_second"] = round(done.total_steps / done.seconds, 3) if done.seconds else 0.0
        if self.losses:
            metrics["train_loss"] = sum(self.losses) / len(self.losses)
        if metrics:
            self.state.log_history.append({**metrics, "epoch": round(self.state.epoch, 4), "step": self.state.global_step})
        return metrics

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def _short(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _worker_env() -> dict[str, str]:
    """The worker imports what the caller could: pickled functions that live in the caller's own
    modules (not in ``__main__``) are pickled by reference and imported again there."""
    env = dict(os.environ)
    paths = [p or os.getcwd() for p in sys.path if not p or os.path.isdir(p)]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths + env.get("PYTHONPATH", "").split(os.pathsep)))
    return env


def _run_worker(config_path: Path, follower: _Follower, live: LiveLink) -> int:
    follower.show = True
    proc = subprocess.Popen(
        [sys.executable, "-m", "grpo_tui.worker", str(config_path)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_worker_env(),
    )  # fmt: skip
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    threading.Thread(target=_copy_stderr, args=(proc.stderr,), daemon=True).start()
    live.follower_thread = threading.current_thread()
    live.attach(proc.stdin)
    try:
        return _follow(proc, follower)
    finally:
        live.attach(None)


def _follow(proc: subprocess.Popen[bytes], follower: _Follower) -> int:
    assert proc.stdin is not None and proc.stdout is not None
    interrupted = False
    while True:
        try:
            for line in proc.stdout:
                follower.feed(line)
            break
        except KeyboardInterrupt:
            if interrupted:  # the second Ctrl-C: do not wait for the checkpoint
                proc.kill()
                proc.wait()
                follower.close()
                raise
            interrupted = True
            follower._say("stopping after a checkpoint (Ctrl-C again to kill the worker)")
            try:
                proc.stdin.write(encode(m.Stop()))
                proc.stdin.flush()
            except OSError:
                pass
    code = proc.wait()
    proc.stdin.close()
    if interrupted:
        follower.close()
        raise KeyboardInterrupt
    return code


def _copy_stderr(stream: IO[bytes]) -> None:
    """The worker's stderr (tracebacks, what rewards print) into this process's, which a notebook shows."""
    for line in stream:
        sys.stderr.write(line.decode("utf-8", errors="replace"))
        sys.stderr.flush()


# ---------------------------------------------------------------- inputs


def _local_or_hub(value: str) -> str:
    path = Path(value).expanduser()
    return str(path.resolve()) if path.exists() else value


def _reward_table(reward: Any, index: int) -> dict[str, Any]:
    if isinstance(reward, dict):
        return dict(reward)
    if isinstance(reward, str):
        if reward in BUILTIN_REWARDS:
            return {"name": reward}
        if ":" in reward:
            return {"function": reward}
        raise TrainingError(
            f"reward_funcs[{index}]: {reward!r} is not a built-in ({', '.join(BUILTIN_REWARDS)}); pass a function "
            "or 'file.py:func' (reward models are not supported)"
        )
    if callable(reward):
        return {"function": reward}
    raise TrainingError(f"reward_funcs[{index}]: {type(reward).__name__} is not a function, a built-in name or a table")


def _environment_table(factory: Any, out: Path) -> dict[str, Any]:
    """``[environment]`` for TRL's ``environment_factory``: a ``"file.py:Name"`` as it is, a class
    pickled into ``environment.pkl`` (cloudpickle: by value for ``__main__`` and notebook cells)."""
    if isinstance(factory, str):
        return {"class": _with_pickles([{"function": factory}], out / "environment.pkl", "environment_factory")[0]["function"]}
    if not callable(factory) or isinstance(factory, dict):
        raise TrainingError(f"environment_factory: {type(factory).__name__} is not a class (dicts of factories are not supported yet)")
    [table] = _with_pickles([{"function": factory}], out / "environment.pkl", "environment_factory", keep_names=True)
    return {"class": table["function"]}


def _with_pickles(tables: list[dict[str, Any]], file: Path, what: str, keep_names: bool = False) -> list[dict[str, Any]]:
    """Tables whose ``function`` is a Python function get ``"<file>:<name>"``, the functions pickled
    into ``file`` (cloudpickle: by value for ``__main__``, notebook cells and closures)."""
    import cloudpickle

    functions: dict[str, Any] = {}
    out = []
    for i, table in enumerate(tables):
        fn = table.get("function")
        if fn is None or isinstance(fn, str):
            if isinstance(fn, str):
                target, _, name = fn.rpartition(":")
                if target.endswith((".py", ".pkl")):
                    table = {**table, "function": f"{Path(target).expanduser().resolve()}:{name}"}
            out.append(table)
            continue
        name = getattr(fn, "__name__", "")
        if not name.isidentifier():
            if keep_names:
                raise TrainingError(f"{what}[{i}]: a tool needs a named function (def ...): the model calls it by name")
            name = f"reward_{i}"
        base, n = name, 2
        while name in functions:
            if keep_names:
                raise TrainingError(f"{what}[{i}]: a second function named {name!r}")
            name, n = f"{base}_{n}", n + 1
        functions[name] = fn
        out.append({**table, "function": f"{file}:{name}"})
    if functions:
        try:
            data = cloudpickle.dumps(functions)
        except Exception as exc:  # noqa: BLE001 — e.g. a closure over a lock or an open file
            raise TrainingError(f"{what}: cannot send these functions to the worker ({type(exc).__name__}: {exc})") from None
        file.write_bytes(data)
    return out


def _dataset_file(dataset: Dataset, file: Path, what: str) -> str:
    """A path or hub id as it is; rows (a ``datasets.Dataset`` or a list of dicts) into ``file``."""
    if isinstance(dataset, (str, os.PathLike)):
        return _local_or_hub(str(dataset))
    if isinstance(dataset, dict) or not isinstance(dataset, Iterable):
        raise TrainingError(
            f"{what}: {type(dataset).__name__} — pass a datasets.Dataset (one split), a list of dicts or a path"
        )
    lines = []
    for i, row in enumerate(dataset):
        if not isinstance(row, dict):
            raise TrainingError(f"{what}[{i}]: {type(row).__name__} is not a dict (a row with a 'prompt')")
        lines.append(json.dumps(row, ensure_ascii=False, default=_plain))
    text = "\n".join(lines) + "\n"
    if not file.exists() or file.read_text(encoding="utf-8") != text:
        file.write_text(text, encoding="utf-8")
    return str(file)


def _plain(value: Any) -> Any:
    """numpy scalars and arrays (a datasets row can hold them) as JSON values."""
    if hasattr(value, "tolist"):
        return value.tolist()
    return str(value)


def _lora_table(peft: Any) -> dict[str, Any]:
    """``peft.LoraConfig`` (or a dict of its names) as ``[model.lora]``."""
    items = dict(peft) if isinstance(peft, dict) else {k: getattr(peft, k) for k in ("r", "lora_alpha", "lora_dropout",
                                                                                      "target_modules") if hasattr(peft, k)}
    names = {"r": "rank", "lora_alpha": "alpha", "lora_dropout": "dropout", "target_modules": "keys"}
    table = {names.get(k, k): v for k, v in items.items() if v is not None}
    if isinstance(table.get("keys"), (set, tuple)):
        table["keys"] = sorted(table["keys"])
    return table


__all__ = ["GRPOTrainer", "TrainerState", "TrainOutput", "TrainingError", "Config"]
