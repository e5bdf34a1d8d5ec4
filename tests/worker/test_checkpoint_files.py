"""Checkpoint directories: atomic writes, discovery of the newest complete one, pruning."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from grpo_tui.common.disk_space import DiskFull
from grpo_tui.common.resume_check import newest_first
from grpo_tui.protocol.layout import LOCK_FILE
from grpo_tui.worker import checkpoint_files as ckpt


class FakeSaver:
    """Writes files the way Trainer.save_model / save_optimizer do; can fail half-way."""

    def __init__(self, fail: bool = False, tag: str = "") -> None:
        self.fail, self.tag = fail, tag

    def save_model(self, directory: Path) -> None:
        (directory / "config.json").write_text("{}")
        if self.fail:
            raise OSError(28, "No space left on device")
        (directory / "model.safetensors").write_text(f"weights {self.tag}")

    def save_optimizer(self, path: Path) -> None:
        path.write_text("optimizer")


def state(step: int, kind: str = "periodic") -> ckpt.TrainingState:
    return ckpt.TrainingState(
        step=step, epoch=0, step_in_epoch=step, kind=kind, run_id=1, seed=0,
        dataset_size=8, dataset_hash="abc", config_digest="d", total_steps=100,
    )  # fmt: skip


def save(out: Path, name: str, step: int, kind: str = "periodic", tag: str = "") -> Path:
    return ckpt.save_checkpoint(FakeSaver(tag=tag), out, name, state(step, kind))


def test_a_checkpoint_holds_model_optimizer_and_state(tmp_path):
    path = save(tmp_path, "checkpoint-3", 3)
    assert sorted(p.name for p in path.iterdir()) == [
        "config.json", "model.safetensors", "optimizer.safetensors", "training_state.json",
    ]  # fmt: skip
    loaded = ckpt.read_state(path)
    assert loaded is not None and (loaded.step, loaded.run_id, loaded.dataset_hash) == (3, 1, "abc")
    assert [p.name for p in tmp_path.iterdir()] == ["checkpoint-3"]  # no temporaries left


def test_a_failed_save_leaves_no_checkpoint_and_the_previous_one_intact(tmp_path):
    save(tmp_path, "final", 2, "final", tag="old")
    with pytest.raises(DiskFull, match="the disk is full: the checkpoint final could not be written to "):
        ckpt.save_checkpoint(FakeSaver(fail=True), tmp_path, "final", state(4, "final"))
    with pytest.raises(DiskFull):
        ckpt.save_checkpoint(FakeSaver(fail=True), tmp_path, "checkpoint-4", state(4))
    assert not (tmp_path / "checkpoint-4").exists()
    latest = newest_first(tmp_path)[0]
    assert latest is not None and latest[0].name == "final" and latest[1].step == 2
    assert (tmp_path / "final" / "model.safetensors").read_text() == "weights old"
    ckpt.recover_interrupted(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["final"]


def test_replacing_a_checkpoint_survives_a_kill_between_the_two_renames(tmp_path):
    save(tmp_path, "final", 2, "final", tag="old")
    (tmp_path / "final").rename(tmp_path / ".old-final")  # the kill came right after this rename
    assert newest_first(tmp_path) == []
    ckpt.recover_interrupted(tmp_path)
    assert (tmp_path / "final" / "model.safetensors").read_text() == "weights old"
    save(tmp_path, "final", 5, "final", tag="new")
    assert ckpt.read_state(tmp_path / "final").step == 5
    assert sorted(p.name for p in tmp_path.iterdir()) == ["final"]


def test_latest_is_the_highest_complete_periodic_manual_or_final_step(tmp_path):
    save(tmp_path, "checkpoint-2", 2)
    save(tmp_path, "emergency-7", 7, "emergency")
    save(tmp_path, "last-good-6", 6)  # a copy keeps its source's kind: the name says what it is
    save(tmp_path, "checkpoint-4", 4, "manual")
    (tmp_path / "checkpoint-9").mkdir()  # no training_state.json: incomplete
    (tmp_path / "checkpoint-9" / "model.safetensors").write_text("half")
    broken = tmp_path / "checkpoint-8"
    broken.mkdir()
    (broken / "training_state.json").write_text("{not json")
    (tmp_path / ".tmp-checkpoint-10").mkdir()
    latest = newest_first(tmp_path)[0]
    assert latest is not None and latest[0].name == "checkpoint-4"  # emergency / last-good only by path
    assert sorted(p.name for p in ckpt.skipped_newer(tmp_path, 4)) == ["emergency-7", "last-good-6"]
    save(tmp_path, "final", 9, "final")
    assert newest_first(tmp_path)[0][0].name == "final"
    assert newest_first(tmp_path / "missing") == []


def test_pruning_keeps_the_newest_periodic_and_every_other_kind(tmp_path):
    for step in (2, 4, 6, 8):
        save(tmp_path, f"checkpoint-{step}", step)
    save(tmp_path, "checkpoint-5", 5, "manual")
    save(tmp_path, "emergency-7", 7, "emergency")
    save(tmp_path, "final", 8, "final")
    removed = ckpt.prune(tmp_path, keep_last=2)
    assert sorted(p.name for p in removed) == ["checkpoint-2", "checkpoint-4"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "checkpoint-5", "checkpoint-6", "checkpoint-8", "emergency-7", "final",
    ]  # fmt: skip
    assert ckpt.prune(tmp_path, keep_last=0) == []  # 0 = keep all


def test_copy_and_set_aside(tmp_path):
    good = save(tmp_path, "checkpoint-4", 4)
    copy = ckpt.copy_checkpoint(good, tmp_path, "last-good-4")
    assert ckpt.read_state(copy).step == 4
    aside = ckpt.set_aside(tmp_path)
    assert aside is not None and sorted(p.name for p in aside.iterdir()) == ["checkpoint-4", "last-good-4"]
    assert newest_first(tmp_path) == [] and ckpt.set_aside(tmp_path) is None


def test_config_digest_ignores_where_and_how_a_run_is_shown(tmp_path):
    from grpo_tui.protocol.config import parse_config

    base = '[model]\npath = "m"\n[data]\npath = "d.jsonl"\n[[rewards]]\nname = "accuracy"\n'
    a = parse_config(base, check_paths=False)
    b = parse_config(base + '[checkpoint]\noutput_dir = "elsewhere"\n[display]\nsample_display = "all"\n', check_paths=False)
    c = parse_config(base + "[training]\nlearning_rate = 0.1\n", check_paths=False)
    assert ckpt.config_digest(a) == ckpt.config_digest(b) != ckpt.config_digest(c)


def test_the_lock_of_a_worker_still_letting_go_is_waited_for(tmp_path):
    """A restarted or resumed worker starts while the killed one is still exiting: it must get the
    folder once the old one lets go, not report 'another worker is already training'."""
    held = subprocess.Popen(
        [sys.executable, "-c",
         "import fcntl, sys, time; f = open(sys.argv[1], 'a+'); fcntl.flock(f, fcntl.LOCK_EX); "
         "print('held', flush=True); time.sleep(1.5)", str(tmp_path / LOCK_FILE)],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert held.stdout is not None and held.stdout.readline().strip() == "held"
    assert ckpt.lock_output_dir(tmp_path, wait_s=0) is None  # held: the old behaviour's answer
    lock = ckpt.lock_output_dir(tmp_path, wait_s=10)
    assert lock is not None
    lock.close()
    held.wait()
