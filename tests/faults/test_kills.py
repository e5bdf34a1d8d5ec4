"""SIGKILL the worker at 22 seeded moments across one run, resume after each, and lose nothing.

Half the moments are exact, through the hold hooks of ``fault_trainer.py`` (mid-rollout, mid-scoring,
before and after the optimizer update, inside the store's step transaction, mid-checkpoint write,
before the checkpoint's rename); the rest are timed: a seeded random delay after a ``status``
frame, landing wherever the worker happens to be. After every kill: every checkpoint folder on disk
loads with ``mlx_lm.load``, every step has exactly one row and its full set of generations, and no
generation row points past the last committed step. At the end the run completes and its final
weights equal those of a run that was never killed (tolerance: atol 1e-6; observed 0.0).
"""

from __future__ import annotations

import collections
import random
import time
from pathlib import Path

import mlx.core as mx
import mlx_lm
import pytest

from grpo_tui.protocol import messages as m
from grpo_tui.common.resume_check import newest_first
from grpo_tui.worker import checkpoint_files as ckpt
from tests.faults import FAULT_TRAINER
from tests.helpers.trainer_env import fake_trainer_env
from tests.helpers.worker_harness import WorkerProcess, query, reward_config, tiny_model, write_config

__all__ = ["tiny_model"]

SEED = 20261130
KILLS = 22
TOTAL = 32  # steps; 8 prompts, batch 2 -> 4 steps per epoch
PER_STEP = 2 * 2  # generations per step: batch 2 x group 2
HOOKS = ["generating", "scoring", "training", "update", "commit", "model_saved", "install"]
PHASES = ["generating", "scoring", "training", "saving"]
_loaded: set[tuple[str, float]] = set()  # checkpoints already loaded once (they never change)


def settings() -> dict:
    return dict(training={"max_steps": TOTAL, "num_epochs": 8}, checkpoint={"save_every": 1, "keep_last": 2})


def latest_checkpoint_step(out: Path) -> int:
    found = newest_first(out)
    return found[0][1].step if found else 0


def check_disk_and_store(out: Path) -> int:
    """The invariants that must hold after any kill. Returns the last committed step."""
    for folder in sorted(p for p in out.iterdir() if p.is_dir() and not p.name.startswith(".")):
        state = ckpt.read_state(folder)
        assert state is not None, f"{folder.name} looks like a checkpoint but has no valid state"
        if (folder.name, state.created_at) not in _loaded:
            assert mlx_lm.load(str(folder))[0] is not None
            _loaded.add((folder.name, state.created_at))
    db = out / "outputs.db"
    if not db.exists():
        return 0
    runs = query(db, "SELECT id, status FROM runs ORDER BY id")
    # A kill before the first checkpoint leaves nothing to resume: the next start records a new
    # run and marks the old one crashed. Every run, old or current, must still be whole.
    assert all(status == "crashed" for _, status in runs[:-1]), runs
    for run_id, _ in runs:
        steps = query(db, "SELECT step, count(*) FROM steps WHERE run_id = ? GROUP BY step ORDER BY step", run_id)
        last = steps[-1][0] if steps else 0
        assert steps == [(s, 1) for s in range(1, last + 1)], steps
        generations = query(
            db, "SELECT step, count(*) FROM generations WHERE run_id = ? GROUP BY step ORDER BY step", run_id
        )
        assert generations == [(s, PER_STEP) for s in range(1, last + 1)], generations  # none past `last`
    total = query(db, "SELECT count(*) FROM generations")[0][0]
    assert query(db, "SELECT count(*) FROM generations_fts") == [(total,)]
    if found := newest_first(out):  # a checkpoint is never ahead of its run's store rows
        assert found[0][1].run_id == runs[-1][0] and found[0][1].step <= last
    return last


def moments(rng: random.Random) -> list[str]:
    """Every hook at least once, then random hooks, and as many timed kills; shuffled."""
    holds = HOOKS + [rng.choice(HOOKS) for _ in range(KILLS // 2 - len(HOOKS))]
    chosen = holds + ["timed"] * (KILLS - len(holds))
    rng.shuffle(chosen)
    return chosen


def kill_once(config: Path, out: Path, mark: Path, rng: random.Random, point: str) -> tuple[str, int, int]:
    """Start the worker, kill it at one seeded moment. Returns (moment, resumed from, steps lost)."""
    resumed_from = latest_checkpoint_step(out) if out.exists() else 0
    step = resumed_from + rng.randint(1, 2)
    assert step < TOTAL
    mark.unlink(missing_ok=True)
    if point != "timed":
        env = {**fake_trainer_env(FAULT_TRAINER), "FAULT_HOLD": f"{point}@{step}", "FAULT_MARK": str(mark)}
        worker = WorkerProcess(config, env=env)
        deadline = time.monotonic() + 120
        while not mark.exists():
            assert worker.proc.poll() is None, worker.stderr.decode()[-3000:]
            assert time.monotonic() < deadline, f"never reached {point}@{step}"
            time.sleep(0.005)
        moment = f"hold {point}"
    else:
        phase, delay = rng.choice(PHASES), rng.uniform(0.0, 0.15)
        message = f"saving checkpoint-{step}" if phase == "saving" else f"step {step}"
        worker = WorkerProcess(config)
        worker.wait_for(m.Status, lambda e: e.phase == phase and e.message == message)
        time.sleep(delay)
        moment = f"{phase} + {delay * 1000:.0f} ms"
    worker.kill()
    assert worker.proc.returncode == -9
    last = check_disk_and_store(out)
    return f"{moment} @ step {step}", resumed_from, max(last - latest_checkpoint_step(out), 0)


def run_to_end(config: Path) -> WorkerProcess:
    worker = WorkerProcess(config)
    worker.wait_for(m.Complete)
    assert worker.finish() == 0, worker.stderr.decode()[-3000:]
    return worker


@pytest.mark.slow
def test_sigkill_at_22_seeded_moments_then_resume_loses_nothing(tmp_path, tiny_model):
    killed, straight = tmp_path / "killed", tmp_path / "straight"
    for folder in (killed, straight):
        folder.mkdir()
    config = write_config(killed, tiny_model, rewards=reward_config(killed, "varied"), **settings())
    out = killed / "out"
    rng = random.Random(SEED)
    started = time.monotonic()
    log = [kill_once(config, out, tmp_path / "mark", rng, point) for point in moments(rng)]

    final = run_to_end(config)
    assert final.of(m.Complete)[0].status == "completed"
    assert check_disk_and_store(out) == TOTAL
    runs = query(out / "outputs.db", "SELECT id, status FROM runs ORDER BY id")
    assert runs[-1][1] == "completed" and all(status == "crashed" for _, status in runs[:-1])
    kill_seconds = time.monotonic() - started

    run_to_end(write_config(straight, tiny_model, rewards=reward_config(straight, "varied"), **settings()))
    a = mx.load(str(out / "final" / "model.safetensors"))
    b = mx.load(str(straight / "out" / "final" / "model.safetensors"))
    start = mx.load(str(tiny_model / "model.safetensors"))
    assert a.keys() == b.keys()
    diff = max(mx.abs(a[k] - b[k]).max().item() for k in a)
    moved = max(mx.abs(b[k] - start[k]).max().item() for k in b)
    same_rows = "SELECT step, loss, reward FROM steps WHERE run_id = (SELECT max(id) FROM runs) ORDER BY step"
    print(f"\n{KILLS} kills survived in {kill_seconds:.0f} s; final weights max |killed - straight| = {diff:g}")
    print("moments:", dict(collections.Counter(moment.split(" @")[0].split(" +")[0] for moment, _, _ in log)))
    print("steps committed but redone after a kill:", sum(lost for _, _, lost in log), "in total")
    for moment, resumed_from, lost in log:
        print(f"  {moment:32s} resumed from step {resumed_from:2d}, {lost} committed step(s) redone")
    assert moved > 1e-4  # training did move the weights, so equality means something
    assert diff <= 1e-6
    assert query(out / "outputs.db", same_rows) == query(straight / "out" / "outputs.db", same_rows)
