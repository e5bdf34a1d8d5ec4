"""Disk trouble: a full disk at checkpoint time, a read-only output folder.

Each gives one clear fatal error, leaves no partial checkpoint folder (not even a hidden temp one
eating the little space left), keeps the previous checkpoint loadable, and a resume once the disk
is fine again finishes the run with every step stored once.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from pathlib import Path
from typing import Iterator

import mlx_lm
import pytest

from grpo_tui.protocol import messages as m
from tests.faults import FAULT_TRAINER
from tests.helpers.read_only import read_only
from tests.helpers.trainer_env import fake_trainer_env
from tests.helpers.worker_harness import WorkerProcess, query, reward_config, tiny_model, write_config

__all__ = ["tiny_model"]

SETTINGS = dict(training={"max_steps": 6, "num_epochs": 2}, checkpoint={"save_every": 2, "keep_last": 0})


def folders(out: Path) -> list[str]:
    return sorted(p.name for p in out.iterdir() if p.is_dir())


def finish_after_fix(config: Path, out: Path) -> None:
    """Once the disk is fine again, a plain restart resumes and completes the run."""
    worker = WorkerProcess(config)
    worker.wait_for(m.Complete)
    assert worker.finish() == 0, worker.stderr.decode()[-3000:]
    assert worker.of(m.ResumeState)[0].step == 2
    db = out / "outputs.db"
    assert query(db, "SELECT step, count(*) FROM steps GROUP BY step") == [(s, 1) for s in range(1, 7)]
    assert query(db, "SELECT id, status FROM runs") == [(1, "completed")]
    assert mlx_lm.load(str(out / "final"))[0] is not None


def assert_clean_failure(worker: WorkerProcess, out: Path, words: tuple[str, ...], previous: str = "checkpoint-2") -> m.Error:
    error = worker.wait_for(m.Error)
    assert worker.finish() != 0
    assert error.fatal and any(w in error.message for w in words), error.message
    assert "\n" not in error.message
    print(f"\nerror shown: {error.message}")
    assert not [name for name in folders(out) if name.startswith(".")]  # no half-written temp folder
    assert mlx_lm.load(str(out / previous))[0] is not None
    return error


@pytest.mark.slow
def test_a_full_disk_at_checkpoint_time_is_one_clear_error(tmp_path, tiny_model):
    config = write_config(tmp_path, tiny_model, rewards=reward_config(tmp_path, "varied"), **SETTINGS)
    out = tmp_path / "out"
    worker = WorkerProcess(config, env={**fake_trainer_env(FAULT_TRAINER), "FAULT_ENOSPC": "4"})
    error = assert_clean_failure(worker, out, ("No space left on device",))
    assert "optimizer.safetensors" in error.message  # says which file could not be written
    assert folders(out) == ["checkpoint-2"]
    assert query(out / "outputs.db", "SELECT status FROM runs") == [("crashed",)]
    finish_after_fix(config, out)


@contextlib.contextmanager
def tmpfs(path: Path, size: str) -> Iterator[Path]:
    path.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)]).returncode:
        pytest.skip("needs root and permission to mount a tmpfs (the injected ENOSPC test covers the rest)")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


@pytest.mark.slow
def test_a_really_full_tmpfs_is_one_clear_error(tmp_path, tiny_model):
    with tmpfs(tmp_path / "disk", "8m") as disk:
        config = write_config(
            tmp_path, tiny_model, rewards=reward_config(tmp_path, "varied"),
            training={"max_steps": 6, "num_epochs": 2}, checkpoint={"save_every": 2, "keep_last": 0, "output_dir": str(disk / "out")},
        )  # fmt: skip
        out = disk / "out"
        worker = WorkerProcess(config)
        worker.wait_for(m.Checkpoint, lambda e: e.step == 2)
        worker.send(m.Pause())
        worker.wait_for(m.Paused)
        filler = disk / "filler"
        # take every byte that is left, unbuffered: a buffered file keeps the part of its last write that
        # did not fit and raises again when it is closed (whether it does depends on the free space)
        with open(filler, "wb", buffering=0) as f:
            with contextlib.suppress(OSError):
                while f.write(b"\0" * 65536):
                    pass
        worker.send(m.SaveCheckpoint())
        assert_clean_failure(worker, out, ("No space left on device", "database or disk is full"))
        assert [n for n in folders(out) if n.startswith("checkpoint-")] == ["checkpoint-2"]
        filler.unlink()
        finish_after_fix(config, out)


@pytest.mark.slow
def test_a_read_only_output_folder_is_one_clear_error(tmp_path, tiny_model):
    out = tmp_path / "out"
    first = write_config(
        tmp_path, tiny_model, rewards=reward_config(tmp_path, "varied"), training={"max_steps": 2, "num_epochs": 2}
    )
    worker = WorkerProcess(first)
    worker.wait_for(m.Complete)
    assert worker.finish() == 0
    config = write_config(tmp_path, tiny_model, rewards=reward_config(tmp_path, "varied"), **SETTINGS)
    before = folders(out)
    with read_only(out):
        worker = WorkerProcess(config)
        # caught before anything is written (common/preflight.py), or by the write that fails
        words = ("cannot be written", "Read-only file system", "Permission denied", "readonly database")
        assert_clean_failure(worker, out, words, previous="final")
        assert folders(out) == before
    finish_after_fix(config, out)
