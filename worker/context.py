"""What every part of a worker run shares: the config, the frames, the MLX thread, the live
control, the store and the loaded trainer (docs/architecture.md, "Processes").

``loop.TrainingLoop`` owns one ``RunContext`` and hands it to its collaborators (``start``,
``checkpoint_policy``, ``nan_stop``, ``evaluation``), so none of them reaches into the loop.
"""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from collections.abc import Sequence
from typing import Any, Callable, TypeVar

from grpo_tui.protocol import messages as m
from grpo_tui.protocol.config import Config
from grpo_tui.worker.command_state import CommandState
from grpo_tui.worker.frames import Emitter
from grpo_tui.worker.trainer_contract import Trainer
from grpo_tui.worker.store import Store

T = TypeVar("T")


class RunContext:
    """The run's shared state and services; one per worker process."""

    def __init__(self, config: Config, emitter: Emitter, config_path: str = "config.toml",
                 overrides: Sequence[str] = ()) -> None:
        self.config = config  # the effective config: the trainer shares it, live changes apply to it
        self.config_path = config_path  # what the messages' commands run again
        self.emitter = emitter
        self.output_dir = Path(config.checkpoint.output_dir)
        self.control = CommandState(display=config.display.sample_display)
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="mlx")
        self.loaded: Trainer | None = None  # the engine's trainer, once loaded
        self.store: Store | None = None
        self.run_id = 0
        self.phase: m.Phase = "loading"
        self.model_identity: dict[str, str] = {}  # the model trained (common/resume_check.py), recorded in checkpoints
        self.overrides = list(overrides)  # the --set items: at a resume they win over the live changes
        self.live_changes: list[m.SettingChanged] = []  # applied so far (resumed ones too), kept by each checkpoint

    @property
    def trainer(self) -> Trainer:
        """The loaded trainer (every caller runs after ``start`` loaded it)."""
        if self.loaded is None:
            raise RuntimeError("the trainer is not loaded yet")
        return self.loaded

    @property
    def step(self) -> int:
        """The last completed step."""
        return self.control.step

    def emit(self, event: m.Event) -> None:
        """The worker's one door for what it says: the frames (stdout, run.jsonl) and, for a log
        line, the store's log table."""
        self.emitter.emit(event)
        if isinstance(event, m.Log) and self.store is not None:
            self.store.queue_log(self.step, event.level, event.message)

    def log(self, level: m.LogLevel, message: str) -> None:
        self.emit(m.Log(level=level, message=message, time=time.time()))

    async def mlx(self, fn: Callable[..., T], *args: Any) -> T:
        """Run on the MLX thread (MLX state stays on one thread)."""
        return await asyncio.get_running_loop().run_in_executor(self.executor, fn, *args)

    def position(self, step: int) -> tuple[int, int]:
        """(epoch, step_in_epoch) after ``step`` steps."""
        if step <= 0:
            return 0, 0
        epoch, in_epoch = divmod(step - 1, self.trainer.steps_per_epoch)  # data.batch_indices' rule
        return epoch, in_epoch + 1
