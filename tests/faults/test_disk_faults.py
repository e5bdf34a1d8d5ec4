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


def assert_clean_failure(worker: WorkerProcess, out: Path, words: tuple[str, ...], previous: str = "checkpoint-2",
                         code: int | None = None) -> m.Error:
    error = worker.wait_for(m.Error)
    assert worker.finish() == code if code is not None else worker.finish() != 0
    assert error.fatal and any(w in error.message for w in words), error.message
    assert "\n" not in error.message
    print(f"\nerror shown: {error.message}")
    assert not [name for name in folders(out) if name.startswith(".")]  # no half-written temp folder
    assert mlx_lm.load(str(out / previous))[0] is not None
    return error


@pytest.mark.slow
@pytest.mark.parametrize("code", ["ENOSPC", "EDQUOT"])  # a full disk, a full quota: the same sentence
def test_a_full_disk_at_checkpoint_time_is_one_clear_error(tmp_path, tiny_model, code):
    config = write_config(tmp_path, tiny_model, rewards=reward_config(tmp_path, "varied"), **SETTINGS)
    out = tmp_path / "out"
    worker = WorkerProcess(config, env={**fake_trainer_env(FAULT_TRAINER), "FAULT_ENOSPC": "4", "FAULT_ERRNO": code})
    error = assert_clean_failure(worker, out, ("the disk is full",), code=2)  # a mistake: never restarted
    assert error.kind == "output" and error.message.startswith(
        f"the disk is full: the checkpoint checkpoint-4 could not be written to {out / '.tmp-checkpoint-4' / 'optimizer.safetensors'} (")
    assert " free on that disk); free some space or set checkpoint.output_dir to a disk with room" in error.message
    assert folders(out) == ["checkpoint-2"]
    assert query(out / "outputs.db", "SELECT status FROM runs") == [("stopped",)]
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
        error = assert_clean_failure(worker, out, ("the disk is full",), code=2)  # MLX's write: no errno, no path
        step = worker.of(m.Paused)[0].step
        assert error.message.startswith(f"the disk is full: the checkpoint checkpoint-{step} could not be written to "
                                        f"{out / f'checkpoint-{step}'} (0 bytes free on that disk)")
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


def fill(disk: Path) -> Path:
    """Take every byte left on ``disk`` (unbuffered: see test_a_really_full_tmpfs_is_one_clear_error)."""
    filler = disk / "filler"
    with open(filler, "wb", buffering=0) as f:
        with contextlib.suppress(OSError):
            while f.write(b"\0" * 65536):
                pass
    return filler


@pytest.mark.slow
def test_a_store_write_on_a_full_disk_is_one_sentence_naming_the_store(tmp_path, tiny_model):
    with tmpfs(tmp_path / "disk", "8m") as disk:
        config = write_config(tmp_path, tiny_model, rewards=reward_config(tmp_path, "varied"),
                              training={"max_steps": 6, "num_epochs": 2},
                              checkpoint={"save_every": 2, "keep_last": 0, "output_dir": str(disk / "out")})
        out = disk / "out"
        worker = WorkerProcess(config)
        worker.wait_for(m.Checkpoint, lambda e: e.step == 2)
        worker.send(m.Pause())
        worker.wait_for(m.Paused)
        filler = fill(disk)
        worker.send(m.Resume())  # the next step's rows do not fit
        error = assert_clean_failure(worker, out, ("the disk is full",), code=2)
        assert error.message.startswith(f"the disk is full: the store could not be written to {out / 'outputs.db'} (")
        filler.unlink()
        finish_after_fix(config, out)


def test_a_run_started_on_a_full_disk_is_one_sentence(tmp_path):
    """`grpo-tui run --detach` said "the run did not start: " with nothing after the colon."""
    import sys

    from tests.helpers.mistake_cases import ROOT, write_run

    with tmpfs(tmp_path / "disk", "1m") as disk:
        config = write_run(tmp_path, checkpoint={"output_dir": str(disk / "out")})
        fill(disk)
        sentence = (f"checkpoint.output_dir: the disk of {disk / 'out'} is full (0 bytes free); free some space or "
                    "choose a folder on a disk with room")
        for args, said in ((["run", str(config), "--detach"], f"grpo-tui: {sentence}\n"),
                           (["worker", str(config), "--plain"], f"[mistake] {sentence}\n"),
                           (["check", str(config)], f"grpo-tui: {sentence}\n")):
            done = subprocess.run([sys.executable, "-m", "grpo_tui.tui.cli", *args], capture_output=True, text=True,
                                  timeout=60, cwd=ROOT, stdin=subprocess.DEVNULL)
            assert done.returncode == 2 and done.stdout + done.stderr == said, (args, done.stdout + done.stderr)


def test_check_says_when_the_runs_checkpoints_would_not_fit_on_the_disk(tmp_path):
    """keep_last = 0 and a checkpoint every step on a small disk: check says how much the checkpoints
    need and what to change, before the run fills the disk at step N."""
    import sys

    from tests.helpers.mistake_cases import ROOT, TINY, write_run

    with tmpfs(tmp_path / "disk", "64m") as disk:
        config = write_run(tmp_path, training={"max_steps": 1000}, checkpoint={
            "output_dir": str(disk / "out"), "save_every": 1, "keep_last": 0})
        done = subprocess.run([sys.executable, "-m", "grpo_tui.tui.cli", "check", str(config)], capture_output=True,
                              text=True, timeout=60, cwd=ROOT)
        assert done.returncode == 0, done.stderr
        [note] = [line for line in done.stdout.splitlines() if "checkpoints may need" in line]
        each = 3 * sum(f.stat().st_size for f in TINY.glob("*.safetensors"))
        from grpo_tui.common.disk_space import human

        assert note.startswith(f"# note: the run's checkpoints may need about {human(1001 * each)} (1001 of about "
                               f"{human(each)}: the weights and AdamW's two moments) and the disk of {disk / 'out'} has ")
        assert note.endswith(" free; lower checkpoint.keep_last, save less often (checkpoint.save_every) or free some space")
        kept = write_run(tmp_path, training={"max_steps": 1000}, checkpoint={
            "output_dir": str(disk / "out"), "save_every": 1, "keep_last": 2})  # 4 fit: no note
        done = subprocess.run([sys.executable, "-m", "grpo_tui.tui.cli", "check", str(kept)], capture_output=True,
                              text=True, timeout=60, cwd=ROOT)
        assert done.returncode == 0 and "checkpoints may need" not in done.stdout, done.stdout
