"""The real MlxTrainer with fault hooks: "hold here" so a test can SIGKILL the worker at an exact
moment, and a simulated full disk.

Loaded into the worker with ``tests.helpers.trainer_env.fake_trainer_env(FAULT_TRAINER)`` (the
worker's test-only hook). ``FAULT_HOLD=<point>@<step>`` picks the moment; when the worker gets
there it creates the file ``FAULT_MARK`` and sleeps, and the test kills it during the sleep:

- ``generating`` / ``scoring`` / ``training``: the step's phase has just started;
- ``update``: the AdamW update is applied in memory but the step is not returned yet;
- ``commit``: inside the store's ``BEGIN IMMEDIATE`` transaction for the step, rows half written;
- ``model_saved``: a checkpoint's temp dir has the model files, not the optimizer or state;
- ``install``: the temp dir is complete, not yet renamed into place.

``FAULT_ENOSPC=<step>`` instead makes the checkpoint of that step fail the way a full disk does:
the model files are written, then ``OSError(ENOSPC)`` (``FAULT_ERRNO=EDQUOT``: a quota that is full
instead). Without either it is the real MlxTrainer.
"""

from __future__ import annotations

import asyncio
import errno
import os
import time
from pathlib import Path

from grpo_tui.worker import checkpoint_files as ckpt
from grpo_tui.worker.store import Store
from grpo_tui.worker.engine.trainer import MlxTrainer

POINT, _, STEP = os.environ.get("FAULT_HOLD", "").partition("@")
HOLD_STEP = int(STEP) if STEP else -1
HOLD_S = 60.0


def _mark(point: str, step: int) -> bool:
    if point != POINT or step != HOLD_STEP:
        return False
    Path(os.environ["FAULT_MARK"]).write_text(f"{point}@{step}")
    return True


def _hold(point: str, step: int) -> None:
    if _mark(point, step):
        time.sleep(HOLD_S)


def _step_of(directory: Path) -> int:
    return int(Path(directory).name.rsplit("-", 1)[-1]) if "-" in Path(directory).name else -2


# ---- the store and the checkpoint writer live in the worker's asyncio / MLX threads: wrap them

_write_generation = Store._write_generation


async def _write_generation_then_hold(self, db, run_id, step, gen, now):  # type: ignore[no-untyped-def]
    await _write_generation(self, db, run_id, step, gen, now)
    if _mark("commit", step):
        await asyncio.sleep(HOLD_S)  # mid-transaction: the step row and one generation are written


Store._write_generation = _write_generation_then_hold  # type: ignore[method-assign]

_install = ckpt._install


def _hold_then_install(tmp: Path, target: Path) -> None:
    _hold("install", _step_of(target))
    _install(tmp, target)


ckpt._install = _hold_then_install


class FaultTrainer(MlxTrainer):
    def __init__(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*args, **kwargs)
        self._step = 0
        update = self.learner.optimizer.update

        def update_then_hold(model, grads):  # type: ignore[no-untyped-def]
            update(model, grads)
            _hold("update", self._step)

        self.learner.optimizer.update = update_then_hold  # type: ignore[method-assign]

    def train_step(self, step, on_phase=lambda p: None):  # type: ignore[no-untyped-def]
        self._step = step

        def phase(name: str) -> None:
            on_phase(name)
            _hold(name, step)

        return super().train_step(step, phase)

    def save_model(self, directory: Path) -> None:
        super().save_model(directory)
        _hold("model_saved", self._step)
        if os.environ.get("FAULT_ENOSPC") == str(self._step):
            code = getattr(errno, os.environ.get("FAULT_ERRNO", "ENOSPC"))
            raise OSError(code, os.strerror(code), str(Path(directory) / "optimizer.safetensors"))
