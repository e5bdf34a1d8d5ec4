"""The worker on two local ranks (``--ranks 2``: mlx.launch, ring): one writer, commands obeyed by
both ranks at the same step boundary, and a killed rank ending the run with one clear error."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from grpo_tui.protocol import messages as m
from tests.helpers.worker_harness import WorkerProcess, query, tiny_model, write_config  # noqa: F401 - fixture

SETTINGS = {
    "grpo": {"group_size": 2},
    "training": {"batch_size": 2, "gradient_accumulation_steps": 2, "learning_rate": 1e-2, "max_steps": 6, "num_epochs": 20, "seed": 0},
    "checkpoint": {"save_every": 0},
}


def _rank_pid(root: int, rank: int, timeout: float = 60) -> int:
    """The pid of ``rank`` among the descendants of ``root`` (MLX_RANK in its environment)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                environ = Path(f"/proc/{entry}/environ").read_bytes().split(b"\0")
                status = Path(f"/proc/{entry}/status").read_text()
            except OSError:
                continue
            if f"MLX_RANK={rank}".encode() not in environ:
                continue
            pid = int(entry)
            while pid > 1:  # walk up to the launcher
                if pid == root:
                    return int(entry)
                ppid = [line for line in Path(f"/proc/{pid}/status").read_text().splitlines() if line.startswith("PPid:")]
                pid = int(ppid[0].split()[1])
            del status
        time.sleep(0.2)
    raise AssertionError(f"no rank {rank} under {root}")


def test_two_ranks_one_writer_and_commands_on_both(tmp_path, tiny_model):
    config = write_config(tmp_path, tiny_model, **SETTINGS)
    worker = WorkerProcess(config, "--ranks", "2")
    try:
        worker.wait_for(m.Step, lambda e: e.step == 1)
        worker.send(m.Pause())
        paused = worker.wait_for(m.Paused)
        worker.send(m.SaveCheckpoint())
        saved = worker.wait_for(m.Checkpoint, lambda e: e.kind == "manual")
        assert saved.step == paused.step
        worker.send(m.Resume())
        worker.wait_for(m.Step, lambda e: e.step == paused.step + 1)
        worker.send(m.Stop())
        done = worker.wait_for(m.Complete)
        assert done.status == "stopped"
        assert worker.finish() == 4  # stopped by the user
    finally:
        worker.kill()
    assert len(worker.of(m.Hello)) == 1 and not worker.bad_lines  # rank 1 wrote nothing on stdout
    steps = [s.step for s in worker.of(m.Step)]
    assert steps == list(range(1, done.total_steps + 1))
    db = tmp_path / "out" / "outputs.db"
    assert [r[0] for r in query(db, "SELECT step FROM steps ORDER BY step")] == steps  # each step once
    assert query(db, "SELECT COUNT(*) FROM generations")[0][0] == len(steps) * 2 * 2
    assert (Path(saved.path) / "training_state.json").is_file()
    assert b"Node with rank" not in worker.stderr  # both ranks exited cleanly


def test_a_killed_rank_ends_the_run_with_one_clear_error(tmp_path, tiny_model):
    config = write_config(tmp_path, tiny_model, **{**SETTINGS, "training": {**SETTINGS["training"], "max_steps": 50}})
    worker = WorkerProcess(config, "--ranks", "2")
    try:
        worker.wait_for(m.Step, lambda e: e.step == 2)
        os.kill(_rank_pid(worker.proc.pid, 1), signal.SIGKILL)
        worker.finish(timeout=60)
    finally:
        worker.kill()
    errors = [e for e in worker.of(m.Error) if e.fatal]
    assert len(errors) == 1, worker.events
    assert "rank 1" in errors[0].message
    # rank 0 could still write: the weights after the last completed step are kept
    [kept] = [e for e in worker.of(m.Checkpoint) if e.kind == "emergency"]
    # ... and the two ranks resume from them: the next step is the one after, each step stored once
    again = WorkerProcess(config, "--ranks", "2", "--resume", kept.path)
    try:
        assert again.wait_for(m.ResumeState).step == kept.step
        again.wait_for(m.Step, lambda e: e.step == kept.step + 2)
        again.send(m.Stop())
        again.wait_for(m.Complete)
        again.finish(timeout=60)
    finally:
        again.kill()
    assert [s.step for s in again.of(m.Step)][:2] == [kept.step + 1, kept.step + 2]
    stored = [r[0] for r in query(tmp_path / "out" / "outputs.db", "SELECT step FROM steps ORDER BY step")]
    assert stored == list(range(1, len(stored) + 1))


def test_a_resumed_two_rank_run_keeps_the_synced_reference_on_both_ranks(tmp_path, tiny_model):
    """Rank 0 alone reads the checkpoint's synced reference and sends it to rank 1 (each rank's
    KL share must be to the same reference for the resumed steps to equal the straight run's)."""
    settings = {**SETTINGS, "grpo": {"group_size": 2, "beta": 0.05, "sync_ref_model": True, "ref_model_sync_steps": 1},
                "training": {**SETTINGS["training"], "max_steps": 4}, "checkpoint": {"save_every": 2}}
    kls = {}
    for name in ("straight", "split"):
        folder = tmp_path / name
        folder.mkdir()
        if name == "split":  # two steps and its final checkpoint, then the same run made 4 steps long
            # (a Stop sent on the step-2 checkpoint raced the last steps on a busy machine)
            first = WorkerProcess(write_config(folder, tiny_model, **{**settings, "training": {**settings["training"], "max_steps": 2}}),
                                  "--ranks", "2")
            try:
                first.wait_for(m.Complete)
                assert first.finish() == 0
            finally:
                first.kill()
        config = write_config(folder, tiny_model, **settings)
        worker = WorkerProcess(config, "--ranks", "2")
        try:
            worker.wait_for(m.Complete)
            assert worker.finish() == 0
        finally:
            worker.kill()
        kls[name] = {s.step: (s.kl, s.loss) for s in worker.of(m.Step)}
    resumed = sorted(kls["split"])
    assert resumed == [3, 4], resumed
    for step in resumed:
        assert kls["split"][step][0] == pytest.approx(kls["straight"][step][0], rel=1e-4, abs=1e-8)
        assert kls["split"][step][1] == pytest.approx(kls["straight"][step][1], rel=1e-4, abs=1e-8)


def test_a_mistake_every_rank_makes_is_said_once_and_exit_code_2(tmp_path, tiny_model):
    """Every rank meets the same mistake in the data; the launch says it once, without a traceback,
    and exits 2 (mlx.launch itself exits 0 whatever its ranks do). A batch that cannot be dealt out
    is said before any rank starts (the user-mistakes suite, tests/faults/test_user_mistakes.py)."""
    data = tmp_path / "rows.jsonl"
    data.write_text('{"question": "What is 1+2?", "answer": "3"}\n' * 4)
    config = write_config(tmp_path, tiny_model, **{**SETTINGS, "data": {"path": str(data)}})
    done = subprocess.run(
        [sys.executable, "-m", "grpo_tui.tui.cli", "worker", str(config), "--plain", "--ranks", "2"],
        capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    sentence = f"{data}:1: no 'prompt' column (the row has 'question', 'answer')"
    both = done.stdout + done.stderr
    assert done.returncode == 2, both
    assert both.count(sentence) == 1 and f"[mistake] {sentence}" in done.stdout, both
    assert "Traceback" not in both and "Node with rank" not in both


def test_a_worker_killed_with_9_leaves_no_rank_training(tmp_path, tiny_model):
    """The worker runs mlx.launch as a child; SIGKILL gives it no chance to stop it, and its stdin
    (the dashboard's pipe) stays open, so the ranks would train on, holding the output folder."""
    config = write_config(tmp_path, tiny_model, **SETTINGS)
    worker = WorkerProcess(config, "--ranks", "2")
    try:
        worker.wait_for(m.Step, lambda e: e.step == 1)
        ranks = [_rank_pid(worker.proc.pid, r) for r in (0, 1)]
        worker.proc.kill()
        deadline = time.monotonic() + 5
        while any(Path(f"/proc/{pid}").exists() and "Z" not in Path(f"/proc/{pid}/stat").read_text().split()[2]
                  for pid in ranks) and time.monotonic() < deadline:
            time.sleep(0.1)
        alive = [pid for pid in ranks if Path(f"/proc/{pid}").exists() and "Z" not in Path(f"/proc/{pid}/stat").read_text().split()[2]]
        assert not alive, f"ranks {alive} still running 5 s after the worker was killed"
    finally:
        worker.kill()


def test_a_live_change_on_two_ranks_applies_at_one_boundary_and_equals_one_rank_with_it(tmp_path, tiny_model):
    """Rank 0 hands the change to rank 1 at the boundary where both agree to go on: a rank that kept
    the old temperature and rate would sample its half of the next steps differently."""
    import mlx.core as mx

    from tests.helpers.worker_harness import reward_config

    two = tmp_path / "two"
    two.mkdir()
    settings = {**SETTINGS, "training": {**SETTINGS["training"], "max_steps": 5, "silent_patience": 0}}
    config = write_config(two, tiny_model, rewards=reward_config(two, "slow"), **settings)
    worker = WorkerProcess(config, "--ranks", "2", env={"SLOW_REWARD_S": "0.1"})
    try:
        worker.wait_for(m.Step, lambda e: e.step == 1)
        worker.send(m.Pause())
        n = worker.wait_for(m.Paused).step
        worker.send(m.SaveCheckpoint())
        worker.wait_for(m.Checkpoint, lambda e: e.kind == "manual")
        worker.send(m.SetSetting(key="generation.temperature", value="0.6"))
        worker.send(m.SetSetting(key="training.learning_rate", value="3e-3"))
        worker.wait_for(m.SettingChanged, lambda e: e.key == "training.learning_rate")
        worker.send(m.Resume())
        worker.wait_for(m.Complete)
        assert worker.finish() == 0
    finally:
        worker.kill()
    assert [round(s.learning_rate, 6) for s in worker.of(m.Step)] == [0.01] * n + [0.003] * (5 - n)

    one = tmp_path / "one"
    one.mkdir()
    config = write_config(one, tiny_model, rewards=reward_config(one, "slow"), **settings)
    alone = WorkerProcess(config, "--resume", str(two / "out" / f"checkpoint-{n}"), "--set",
                          "generation.temperature=0.6", "--set", "training.learning_rate=3e-3", env={"SLOW_REWARD_S": "0"})
    alone.wait_for(m.Complete)
    assert alone.finish() == 0
    a = mx.load(str(two / "out" / "final" / "model.safetensors"))
    b = mx.load(str(one / "out" / "final" / "model.safetensors"))
    assert max(mx.abs(a[k] - b[k]).max().item() for k in a) < 1e-5
    [step] = [s for s in worker.of(m.Step) if s.step == n + 1]
    assert [s.completion_mean_length for s in alone.of(m.Step) if s.step == n + 1] == [step.completion_mean_length]
