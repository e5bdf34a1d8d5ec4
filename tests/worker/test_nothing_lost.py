"""Nothing lost: every clean stop leaves a checkpoint that ``resume = "latest"`` goes on from, a NaN
stop says a command that works, damaged checkpoints and stores are named with a way on, another
model is never trained from an old checkpoint, and the store never holds a step twice."""

from __future__ import annotations

import re
import shlex
import signal
from pathlib import Path

import pytest

from grpo_tui.protocol import messages as m
from tests.helpers.trainer_env import fake_trainer_env
from tests.helpers.tiny_model import build_tiny_model
from tests.helpers.worker_harness import FAULTY_TRAINER, WorkerProcess, query, reward_config, tiny_model, write_config

__all__ = ["tiny_model"]

ENDLESS = dict(training={"max_steps": 0, "num_epochs": 50}, checkpoint={"save_every": 0})


def _no_step_twice(db: Path) -> None:
    assert query(db, "SELECT run_id, step FROM steps GROUP BY run_id, step HAVING count(*) > 1") == []
    per_step = query(db, "SELECT count(*) FROM generations GROUP BY run_id, step")
    assert per_step and set(per_step) == {(4,)}  # batch 2 x group 2, each step once


def _stop(worker: WorkerProcess, how: str) -> None:
    if how == "eof":
        worker.proc.stdin.close()
    elif how == "STOP":
        worker.send(m.Stop())
    else:
        worker.proc.send_signal(getattr(signal, how))


@pytest.mark.parametrize("how", ["SIGTERM", "SIGINT", "SIGHUP", "eof", "STOP"])
def test_every_clean_stop_leaves_a_checkpoint_that_latest_goes_on_from(tmp_path, tiny_model, how):
    config = write_config(tmp_path, tiny_model, rewards=reward_config(tmp_path, "varied"), **ENDLESS)
    worker = WorkerProcess(config)
    worker.wait_for(m.Step, lambda e: e.step >= 3)
    _stop(worker, how)
    done = worker.wait_for(m.Complete)
    worker.finish()
    at = done.total_steps
    (saved,) = worker.of(m.Checkpoint)
    assert saved.step == at and "emergency" not in saved.path  # before: emergency-N, which latest skipped
    again = WorkerProcess(config, "--set", f"training.max_steps={at + 2}")
    again.wait_for(m.Complete)
    assert again.finish() == 0
    assert again.of(m.ResumeState)[0].step == at
    assert [s.step for s in again.of(m.Step)] == [at + 1, at + 2]
    assert not [e for e in again.of(m.Log) if "not resuming" in e.message]
    _no_step_twice(tmp_path / "out" / "outputs.db")


def test_a_nan_stop_gives_a_command_that_works(tmp_path, tiny_model):
    config = write_config(tmp_path, tiny_model, rewards=reward_config(tmp_path, "varied"),
                          training={"nan_patience": 2, "max_steps": 6})
    worker = WorkerProcess(config, env={**fake_trainer_env(FAULTY_TRAINER), "FAKE_SKIP_STEPS": "3,4"})
    worker.wait_for(m.Complete)
    assert worker.finish() == 3
    advice = [e for e in worker.of(m.Error) if "non-finite" in e.message][-1].message
    command = re.search(r"`(grpo-tui run [^`]+)`", advice)
    assert command is not None, advice
    args = shlex.split(command.group(1))
    assert args[:3] == ["grpo-tui", "run", str(config)]
    # `grpo-tui run` hands these arguments to the worker unchanged (tui/cli.py)
    resumed = WorkerProcess(Path(args[2]), *args[3:], env=fake_trainer_env(FAULTY_TRAINER))
    assert resumed.finish() == 0, (args, resumed.of(m.Error))
    assert resumed.of(m.ResumeState)[0].step == 2  # the last good checkpoint, not the emergency
    assert [s.learning_rate for s in resumed.of(m.Step)][0] == pytest.approx(1e-3)  # the lower rate it named


@pytest.mark.parametrize("damaged", ["model.safetensors", "optimizer.safetensors"])
def test_a_damaged_newest_checkpoint_is_set_aside_and_the_run_resumes_from_the_one_before(tmp_path, tiny_model, damaged):
    config = write_config(tmp_path, tiny_model, rewards=reward_config(tmp_path, "varied"),
                          checkpoint={"save_every": 2, "keep_last": 0})
    first = WorkerProcess(config)
    first.wait_for(m.Complete)
    assert first.finish() == 0
    out = tmp_path / "out"
    newest = out / "final"
    target = newest / damaged
    target.write_bytes(target.read_bytes()[: target.stat().st_size // 2])
    again = WorkerProcess(config, "--set", "training.max_steps=6")
    again.wait_for(m.Complete)
    assert again.finish() == 0
    assert again.of(m.ResumeState)[0].step == 2 and [s.step for s in again.of(m.Step)] == [3, 4, 5, 6]
    said = " ".join(e.message for e in again.of(m.Log))
    assert f"checkpoint {newest} does not load: {damaged} is" in said and "set aside as damaged-final" in said
    assert "resuming from" in said and "checkpoint-2 instead" in said
    assert (out / "damaged-final" / damaged).exists()  # kept, never deleted
    _no_step_twice(out / "outputs.db")


def test_a_damaged_store_is_named_with_a_fresh_store_or_none_as_the_ways_on(tmp_path, tiny_model):
    config = write_config(tmp_path, tiny_model, rewards=reward_config(tmp_path, "varied"), training={"max_steps": 2})
    first = WorkerProcess(config)
    first.wait_for(m.Complete)
    assert first.finish() == 0
    db = tmp_path / "out" / "outputs.db"
    db.write_bytes(db.read_bytes()[: db.stat().st_size // 2])
    refused = WorkerProcess(config, "--set", "training.max_steps=4")
    assert refused.finish() != 0 and not refused.of(m.Step)
    (error,) = [e for e in refused.of(m.Error) if e.fatal]
    assert f"the store {db} is damaged" in error.message
    commands = re.findall(r"`(grpo-tui run [^`]+)`", error.message)
    assert [c.split("--set ")[1] for c in commands] == ["store.if_damaged=fresh", "store.enabled=false"]
    fresh = WorkerProcess(config, "--set", "training.max_steps=4", *shlex.split(commands[0])[3:])
    fresh.wait_for(m.Complete)
    assert fresh.finish() == 0
    assert [s.step for s in fresh.of(m.Step)] == [3, 4]  # the checkpoint still resumes
    kept = list(db.parent.glob("outputs.damaged-*.db"))
    assert len(kept) == 1 and kept[0].stat().st_size > 0
    assert query(db, "SELECT step FROM steps ORDER BY step") == [(3,), (4,)]


def test_resuming_with_another_model_is_a_mistake_naming_both(tmp_path, tiny_model):
    config = write_config(tmp_path, tiny_model, rewards=reward_config(tmp_path, "varied"), training={"max_steps": 2})
    first = WorkerProcess(config)
    first.wait_for(m.Complete)
    assert first.finish() == 0
    other = build_tiny_model(tmp_path / "other-model", seed=1)  # same architecture, other weights
    changed = WorkerProcess(config, "--set", f"model.path={other}", "--set", "training.max_steps=4")
    assert changed.finish() != 0 and not changed.of(m.Step)  # before: the old weights trained on
    (error,) = [e for e in changed.of(m.Error) if e.fatal]
    assert f"was trained from the model {tiny_model}" in error.message and f"model.path is now {other}" in error.message
    assert "--set checkpoint.resume=false" in error.message and "checkpoint.output_dir" in error.message
    fresh = WorkerProcess(config, "--set", f"model.path={other}", "--set", "checkpoint.resume=false")
    fresh.wait_for(m.Complete)
    assert fresh.finish() == 0 and not fresh.of(m.ResumeState) and len(fresh.of(m.Step)) == 2


NONE_PY = """
def nothing(completions, **kwargs):
    return [None] * len(completions)

def half(completions, **kwargs):
    return [0.5] * len(completions)

def solved(completions, **kwargs):
    return [1.0] * len(completions)

def zero(completions, **kwargs):
    return [0.0] * len(completions)
"""


def quiet_run(folder, model, reward: str, **training):
    (folder / "quiet.py").write_text(NONE_PY)
    return write_config(folder, model, rewards=f'[[rewards]]\nfunction = "{folder / "quiet.py"}:{reward}"\n',
                        training={"max_steps": 0, "num_epochs": 50, **training}, checkpoint={"save_every": 0})


@pytest.mark.parametrize(("reward", "patience", "why"), [
    ("nothing", None, "every reward of its 4 completions is None"),
    ("half", 3, "all 4 completions got the same reward, 0.5"),
])
def test_steps_without_a_learning_signal_warn_once_then_stop_the_run(tmp_path, tiny_model, reward, patience, why):
    worker = WorkerProcess(quiet_run(tmp_path, tiny_model, reward, **({"silent_patience": patience} if patience else {})))
    done = worker.wait_for(m.Complete)
    assert worker.finish() == 2  # a fixable mistake; before: it trained on nothing until the end, exit 0
    stop_at = patience or 10
    assert done.total_steps == stop_at and done.status == "stopped"
    warned = [e.message for e in worker.of(m.Log) if e.level == "warning" and "trains on nothing" in e.message]
    assert len(warned) == 1 and why in warned[0] and f"{stop_at} such steps in a row stop the run" in warned[0]
    (error,) = [e for e in worker.of(m.Error) if e.fatal]
    assert error.message.startswith(f"training stopped: {stop_at} steps in a row had no learning signal")
    assert "training.silent_patience = 0" in error.message
    assert [(c.step, "emergency" in c.path) for c in worker.of(m.Checkpoint)] == [(stop_at, False)]


def test_a_solved_task_is_done_with_its_model_in_final(tmp_path, tiny_model):
    """Reward 1.0 on every completion: the run solved its task; not a mistake (it was exit 2)."""
    worker = WorkerProcess(quiet_run(tmp_path, tiny_model, "solved", silent_patience=3))
    done = worker.wait_for(m.Complete)
    assert worker.finish() == 0 and done.status == "completed" and done.total_steps == 3
    assert not [e for e in worker.of(m.Error) if e.fatal]
    [said] = [e.message for e in worker.of(m.Log) if e.level == "info" and "solved" in e.message]
    assert said.startswith("training stopped early, solved: every completion of the last 3 steps got the reward 1, the "
                           "best of the run (step 3)")
    assert [c.kind for c in worker.of(m.Checkpoint)] == ["final"]


def test_a_task_too_hard_for_the_model_says_so_with_its_own_exit_code(tmp_path, tiny_model):
    """Reward 0 on every completion: exit 5, a sentence that says the task is too hard (it was exit 2)."""
    worker = WorkerProcess(quiet_run(tmp_path, tiny_model, "zero", silent_patience=3))
    done = worker.wait_for(m.Complete)
    assert worker.finish() == 5 and done.status == "stopped" and done.total_steps == 3
    (error,) = [e for e in worker.of(m.Error) if e.fatal]
    assert error.exit_code == 5 and error.kind is None and error.message.startswith(
        "training stopped: no completion earned a reward in 3 steps in a row (every one scored 0, the lowest of the "
        "run; step 3), so nothing trains; the task is too hard for the model as it is")
    assert [c.kind for c in worker.of(m.Checkpoint)] == ["periodic"]
