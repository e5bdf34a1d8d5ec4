"""The training features through the real worker process on the tiny model: evaluation, LR
schedules across a resume, safe "latest", early stops, plain control lines, the BLAS warning."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from grpo_tui.protocol import messages as m
from grpo_tui.protocol.outcome import Exit
from grpo_tui.worker.engine.learning.schedule import lr_at
from tests.helpers.trainer_env import fake_trainer_env
from tests.helpers.worker_harness import (
    FAULTY_TRAINER, ROOT, WorkerProcess, query, reward_config, tiny_model, write_config,
)  # fmt: skip

__all__ = ["tiny_model"]

ACCURACY = '[[rewards]]\nname = "accuracy"\n[[rewards]]\nname = "length"\nweight = 0.1\n'


def run_to_end(config, *args: str, **env: str) -> WorkerProcess:
    worker = WorkerProcess(config, *args, env=env)
    worker.wait_for(m.Complete)
    assert worker.finish() == 0, worker.stderr.decode()[-2000:]
    return worker


def steps(folder) -> list[tuple]:
    return query(folder / "out" / "outputs.db", "SELECT step, loss, reward, learning_rate FROM steps ORDER BY step")


def test_eval_runs_at_start_every_n_steps_and_at_the_end_and_is_stored(tmp_path, tiny_model):
    config = write_config(
        tmp_path, tiny_model, rewards=ACCURACY,
        eval={"every": 2, "limit": 3, "greedy": False, "num_samples": 2, "batch_size": 2},
    )  # fmt: skip
    worker = run_to_end(config)
    evals = worker.of(m.Eval)
    assert [e.step for e in evals] == [0, 2, 4]
    for e in evals:
        assert (e.num_prompts, e.num_samples, e.greedy) == (3, 2, False)
        assert set(e.rewards) == {"accuracy", "length"}
        assert e.accuracy is not None and 0.0 <= e.accuracy <= 1.0
        assert e.pass_at_k is not None and e.pass_at_k >= e.accuracy - 1e-9
        assert e.seconds > 0
    # Frames in order: the step-2 eval comes after step 2 and before step 3.
    order = [(type(e).__name__, getattr(e, "step", None)) for e in worker.events if isinstance(e, (m.Step, m.Eval))]
    assert order.index(("Eval", 2)) == order.index(("Step", 2)) + 1
    rows = query(tmp_path / "out" / "outputs.db", "SELECT step, accuracy, num_prompts FROM evals ORDER BY step")
    assert [(s, n) for s, _, n in rows] == [(0, 3), (2, 3), (4, 3)]
    assert [r[1] for r in rows] == pytest.approx([e.accuracy for e in evals])


def test_lr_schedule_and_eval_survive_a_kill_and_resume_exactly(tmp_path, tiny_model):
    """Straight 6 steps vs 3 + SIGKILL + resume: the same learning rates, losses and rewards,
    and evaluating between steps changes none of them."""
    settings = dict(
        rewards=ACCURACY,
        training={"max_steps": 6, "num_epochs": 2, "lr_scheduler_type": "linear", "warmup_steps": 2},
        checkpoint={"save_every": 3},
    )
    straight, split, no_eval = (tmp_path / name for name in ("straight", "split", "no_eval"))
    for folder in (straight, split, no_eval):
        folder.mkdir()
    run_to_end(write_config(straight, tiny_model, eval={"every": 2, "limit": 2}, **settings))
    run_to_end(write_config(no_eval, tiny_model, **settings))

    config = write_config(split, tiny_model, eval={"every": 2, "limit": 2}, **settings)
    first = WorkerProcess(config)
    first.wait_for(m.Checkpoint, lambda c: c.step == 3)
    first.kill()
    resumed = run_to_end(config)
    assert resumed.of(m.ResumeState)[0].step == 3
    assert [e.step for e in resumed.of(m.Step)] == [4, 5, 6]

    expected = [lr_at(s, 1e-2, "linear", 6, warmup_steps_=2) for s in range(1, 7)]
    assert [row[3] for row in steps(straight)] == pytest.approx(expected, rel=1e-6)
    assert expected[0] == 0.0 and expected[2] > expected[5]  # warmup, then decay: not constant
    assert steps(split) == steps(straight) == steps(no_eval)
    assert [e.learning_rate for e in resumed.of(m.Step)] == pytest.approx(expected[3:], rel=1e-6)


def test_latest_never_resumes_from_a_nan_emergency_checkpoint(tmp_path, tiny_model):
    config = write_config(
        tmp_path, tiny_model, rewards=reward_config(tmp_path, "varied"),
        training={"nan_patience": 2, "max_steps": 6},
    )  # fmt: skip
    env = {**fake_trainer_env(FAULTY_TRAINER), "FAKE_SKIP_STEPS": "3,4"}
    worker = WorkerProcess(config, env=env)
    worker.wait_for(m.Complete)
    assert worker.finish() != 0  # a NaN stop is not a completed run
    assert [(c.kind, c.step) for c in worker.of(m.Checkpoint)] == [("periodic", 2), ("emergency", 4)]
    assert worker.of(m.Complete)[0].status == "stopped"
    advice = [e for e in worker.of(m.Error) if "non-finite" in e.message][-1].message
    good = tmp_path / "out" / "last-good-2"
    assert "learning_rate" in advice and f"--set checkpoint.resume={good}" in advice

    # The dashboard's crash restart: `--resume latest` picks checkpoint-2, never emergency-4.
    again = WorkerProcess(config, "--resume", "latest", env=fake_trainer_env(FAULTY_TRAINER))
    again.wait_for(m.Complete)
    assert again.finish() == 0
    assert again.of(m.ResumeState)[0].step == 2
    assert any("emergency-4" in e.message for e in again.of(m.Log))  # says the newer one was skipped
    # An explicit path still resumes from the emergency copy.
    explicit = WorkerProcess(config, "--resume", str(tmp_path / "out" / "emergency-4"),
                             env=fake_trainer_env(FAULTY_TRAINER))
    explicit.wait_for(m.Complete)
    assert explicit.finish() == 0 and explicit.of(m.ResumeState)[0].step == 4


def test_plain_text_lines_drive_a_plain_worker(tmp_path, tiny_model):
    config = write_config(
        tmp_path, tiny_model, rewards=reward_config(tmp_path, "slow"),
        training={"max_steps": 0, "num_epochs": 50}, checkpoint={"save_every": 0},
    )  # fmt: skip
    proc = subprocess.Popen(
        [sys.executable, "-m", "grpo_tui.worker", str(config), "--plain"], cwd=ROOT,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env={**__import__("os").environ,
        "SLOW_REWARD_S": "0.2"},
    )  # fmt: skip
    assert proc.stdin is not None and proc.stdout is not None
    lines: list[str] = []

    def until(text: str, timeout: float = 120) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = proc.stdout.readline().decode()
            if not line:
                break
            lines.append(line)
            if text in line:
                return line
        raise AssertionError(f"no line with {text!r}:\n{''.join(lines[-30:])}")

    def send(text: str) -> None:
        proc.stdin.write(text.encode() + b"\n")
        proc.stdin.flush()

    try:
        until("step 1")
        send("FROBNICATE")
        assert "PAUSE" in until("unknown command line 'FROBNICATE'")
        send("SET sample_display=all")
        until("sample display: all")
        send("PAUSE")
        until("paused at step")
        send("SAVE_CHECKPOINT")
        until("checkpoint (manual)")
        send("RESUME")
        until("resumed at step")
        send("STOP")
        until("stopped:")
        assert proc.wait(timeout=120) == Exit.STOPPED  # a user's stop (resumable) is not "done"
    finally:
        if proc.poll() is None:
            proc.kill()


def test_stop_strings_and_the_repetition_stop_end_rows_in_the_worker(tmp_path, tiny_model):
    """The tiny random model's greedy text loops; both rules end its rows long before the limit."""
    config = write_config(
        tmp_path, tiny_model, training={"max_steps": 1},
        generation={"max_completion_length": 64, "temperature": 0.05, "repetition_stop_ngram": 2,
                    "repetition_stop_count": 3},
    )  # fmt: skip
    run_to_end(config)
    rows = query(tmp_path / "out" / "outputs.db", "SELECT num_tokens, finish_reason FROM generations")
    assert any(f == "repetition" and n < 64 for n, f in rows), rows


def test_a_worker_on_mkl_gives_no_slow_blas_warning(tmp_path, tiny_model):
    """The reference BLAS's warning, and its command run as printed: tests/test_printed_commands.py."""
    worker = run_to_end(write_config(tmp_path, tiny_model, training={"max_steps": 1}))
    assert not any("slow BLAS" in e.message for e in worker.of(m.Log))  # MKL is found: no warning


def test_save_and_stop_are_answered_between_eval_batches(tmp_path, tiny_model):
    config = write_config(
        tmp_path, tiny_model, rewards=reward_config(tmp_path, "slow"),
        training={"max_steps": 2}, eval={"every": 0, "limit": 8, "batch_size": 1},
    )  # fmt: skip
    worker = WorkerProcess(config, env={"SLOW_REWARD_S": "0.5"})  # each eval batch scores for 0.5 s
    worker.wait_for(m.Status, lambda e: e.phase == "evaluating")
    worker.send(m.SaveCheckpoint())
    saved = worker.wait_for(m.Checkpoint)
    assert (saved.kind, saved.step) == ("manual", 0) and not worker.of(m.Eval)  # mid-evaluation
    worker.send(m.Stop())
    worker.wait_for(m.Complete)
    assert worker.finish() == 4  # stopped by the user (protocol/outcome.py)
    assert not worker.of(m.Eval) and not worker.of(m.Step)  # the stop did not wait for 8 batches
    assert any("evaluation at step 0 abandoned" in e.message for e in worker.of(m.Log))
