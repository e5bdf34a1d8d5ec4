"""The real worker process over real pipes, on a tiny random Qwen3 model with the real Trainer."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import mlx_lm
import pytest

from grpo_tui.protocol import messages as m
from grpo_tui.protocol.codec import decode_event
from grpo_tui.protocol.config import load_config
from grpo_tui.common.tomlout import dumps
from tests.helpers.trainer_env import fake_trainer_env
from tests.helpers.worker_harness import (
    FAULTY_TRAINER, ROOT, TOOL_CALL_TEXT, WorkerProcess, build_tool_calling_model, query, reward_config,
    tiny_model, write_config,
)  # fmt: skip

__all__ = ["tiny_model"]  # the fixture, imported for pytest


def test_a_full_run_sends_every_frame_in_order_and_stores_every_generation(tmp_path, tiny_model):
    config = write_config(tmp_path, tiny_model, rewards=reward_config(tmp_path, "varied", "noisy"))
    worker = WorkerProcess(config)
    worker.wait_for(m.Complete)
    assert worker.finish() == 0
    assert worker.bad_lines == []  # the reward printed on stdout and on fd 1; frames stayed clean
    assert b"a reward function printing to stdout" in worker.stderr
    assert b"raw bytes written straight to fd 1" in worker.stderr

    kinds = [type(e).__name__ for e in worker.events if not isinstance(e, (m.Status, m.Log))]
    assert kinds[:4] == ["Hello", "DatabasePath", "Init", "EpochStart"]
    assert kinds[-3:] == ["EpochEnd", "Checkpoint", "Complete"]
    assert isinstance(worker.events[1], m.Status) and worker.events[1].phase == "loading"
    assert [e.step for e in worker.of(m.Step)] == [1, 2, 3, 4]
    assert [(c.kind, c.step) for c in worker.of(m.Checkpoint)] == [("periodic", 2), ("final", 4)]
    assert {s.step for s in worker.of(m.Sample)} == {1, 2, 3, 4}
    assert all(len([s for s in worker.of(m.Sample) if s.step == n]) == 2 for n in range(1, 5))  # best + worst
    assert worker.of(m.Complete)[0].status == "completed"
    assert {p.phase for p in worker.of(m.Status)} >= {"loading", "generating", "scoring", "training", "saving"}

    out = tmp_path / "out"
    db = out / "outputs.db"
    assert query(db, "SELECT status, ended_at IS NOT NULL FROM runs") == [("completed", 1)]
    assert [r[0] for r in query(db, "SELECT step FROM steps ORDER BY step")] == [1, 2, 3, 4]
    gens = query(db, "SELECT reward, reward_details, advantage, finish_reason FROM generations")
    assert len(gens) == 4 * 2 * 2  # steps x prompts x group
    for reward, details, advantage, finish in gens:
        breakdown = json.loads(details)
        assert set(breakdown) == {"varied", "noisy"}
        assert reward == sum(v for v in breakdown.values())
        assert advantage is not None and finish in ("stop", "length", "repetition")
    assert query(db, "SELECT count(*) FROM logs WHERE message LIKE 'loading%'") == [(1,)]

    # run.jsonl holds the same events, samples included.
    lines = (out / "run.jsonl").read_bytes().splitlines()
    assert [type(decode_event(line)).__name__ for line in lines] == [type(e).__name__ for e in worker.events]
    assert mlx_lm.load(str(out / "final"))[0] is not None


def endless_slow_run(tmp_path, tiny_model, save_every: int):
    """A run that outlasts any test (50 epochs) with a reward that sleeps SLOW_REWARD_S per call."""
    return write_config(
        tmp_path, tiny_model, rewards=reward_config(tmp_path, "slow"),
        training={"max_steps": 0, "num_epochs": 50}, checkpoint={"save_every": save_every},
    )  # fmt: skip


def test_live_control_pause_resume_save_display_stop(tmp_path, tiny_model):
    config = endless_slow_run(tmp_path, tiny_model, save_every=0)
    worker = WorkerProcess(config, env={"SLOW_REWARD_S": "0.3"})
    first = worker.wait_for(m.Step)

    worker.send(m.Pause())  # the next step is running: acknowledged at once, paused after it
    ack = worker.wait_for(m.Log, lambda e: "pause requested" in e.message)
    paused = worker.wait_for(m.Paused)
    assert paused.step >= first.step and worker.events.index(ack) < worker.events.index(paused)
    worker.send(m.Pause())
    assert "already paused" in worker.wait_for(m.Error).message

    worker.send(m.SaveCheckpoint())  # while paused: saved right away, kind manual
    saved = worker.wait_for(m.Checkpoint)
    assert (saved.kind, saved.step) == ("manual", paused.step)
    assert saved.path.endswith(f"checkpoint-{paused.step}") and mlx_lm.load(saved.path)[0] is not None
    assert not [e for e in worker.events if isinstance(e, m.Step) and e.step > paused.step]

    worker.send(m.SetSampleDisplay(mode="all"))
    worker.send(b'{"type": "pause", "oops\n')  # malformed: a non-fatal error, the run goes on
    bad = worker.wait_for(m.Error)
    assert not bad.fatal and "invalid command" in bad.message
    worker.send(m.Resume())
    assert worker.wait_for(m.Resumed).step == paused.step
    worker.send(m.Resume())
    assert worker.wait_for(m.Error).message == "cannot resume: the run is not paused"
    step = worker.wait_for(m.Step, lambda e: e.step > paused.step + 1)
    worker.wait_for(m.Step, lambda e: e.step == step.step + 1)  # a step's samples follow its frame
    assert len([s for s in worker.of(m.Sample) if s.step == step.step]) == 4  # display "all": 2 prompts x 2

    worker.send(m.Stop())
    done = worker.wait_for(m.Complete)
    assert worker.finish() == 4  # stopped by the user
    final = [c for c in worker.of(m.Checkpoint) if c.kind == "final"]
    assert done.status == "stopped" and final and final[0].step == done.total_steps
    assert mlx_lm.load(final[0].path)[0] is not None
    db = tmp_path / "out" / "outputs.db"
    assert query(db, "SELECT status FROM runs") == [("stopped",)]
    assert query(db, "SELECT max(step), count(*) FROM steps") == [(done.total_steps, done.total_steps)]


def test_a_bad_config_is_one_fatal_error_frame_and_exit_code_2(tmp_path, tiny_model):
    config = write_config(tmp_path, tiny_model, grpo={"loss_type": "dpo"})
    worker = WorkerProcess(config)
    assert worker.finish() == 2
    assert [type(e) for e in worker.events] == [m.Hello, m.Error]
    error = worker.events[1]
    assert error.fatal and "grpo.loss_type: 'dpo' is not one of" in error.message
    assert b"Traceback" not in worker.stderr


def test_resuming_from_a_folder_that_is_not_a_checkpoint_is_one_fatal_error(tmp_path, tiny_model):
    not_a_checkpoint = tmp_path / "somewhere"
    not_a_checkpoint.mkdir()
    worker = WorkerProcess(write_config(tmp_path, tiny_model, checkpoint={"resume": str(not_a_checkpoint)}))
    assert worker.finish() == 2
    assert [type(e) for e in worker.events] == [m.Hello, m.Status, m.Error]
    assert worker.events[-1].fatal and "is not a complete checkpoint" in worker.events[-1].message


def test_a_failing_reward_is_a_mistake_naming_the_function_and_leaves_the_store_consistent(tmp_path, tiny_model):
    config = write_config(tmp_path, tiny_model, rewards=reward_config(tmp_path, "boom"), checkpoint={"save_every": 0})
    worker = WorkerProcess(config, env={"BOOM_AT_CALL": "3"})
    error = worker.wait_for(m.Error)
    assert worker.finish() == 2  # the user's code to fix: a mistake, never restarted
    assert error.fatal and error.kind == "reward" and error.message.startswith(
        f"reward function 'boom' raised ValueError: boom: the reward service is down at {tmp_path / 'rewards.py'}:")
    db = tmp_path / "out" / "outputs.db"
    assert query(db, "SELECT status FROM runs") == [("stopped",)]
    assert query(db, "SELECT step FROM steps") == [(1,), (2,)]
    assert query(db, "SELECT max(step), count(*) FROM generations") == [(2, 8)]
    # The failure came before the update: the weights after step 2 are worth keeping.
    assert [(c.kind, c.step) for c in worker.of(m.Checkpoint)] == [("emergency", 2)]
    assert not worker.of(m.Complete)


def test_closing_stdin_checkpoints_and_exits(tmp_path, tiny_model):
    config = endless_slow_run(tmp_path, tiny_model, save_every=0)
    worker = WorkerProcess(config, env={"SLOW_REWARD_S": "0.1"})
    worker.wait_for(m.Step)
    second = WorkerProcess(config)  # the same output folder: refused while the first one trains
    assert second.finish() == 2
    assert [type(e) for e in second.events] == [m.Hello, m.Status, m.Error]
    assert "another worker is already training" in second.events[-1].message
    worker.proc.stdin.close()
    done = worker.wait_for(m.Complete)
    assert worker.finish() == 4  # stopped: the dashboard is gone
    assert done.status == "stopped"
    # a clean stop: checkpoint-N, which resume = "latest" picks
    assert [(c.kind, c.step) for c in worker.of(m.Checkpoint)] == [("periodic", done.total_steps)]
    assert query(tmp_path / "out" / "outputs.db", "SELECT status FROM runs") == [("stopped",)]


def test_sigterm_saves_a_checkpoint_that_latest_picks(tmp_path, tiny_model):
    config = write_config(
        tmp_path, tiny_model, rewards=reward_config(tmp_path, "varied"),
        training={"max_steps": 0, "num_epochs": 50}, checkpoint={"save_every": 0},
    )  # fmt: skip
    worker = WorkerProcess(config)
    worker.wait_for(m.Step, lambda e: e.step >= 5)
    worker.proc.send_signal(signal.SIGTERM)
    done = worker.wait_for(m.Complete)
    assert worker.finish() == 4  # stopped by a signal
    kinds = [(c.kind, c.step) for c in worker.of(m.Checkpoint)]
    assert kinds == [("periodic", done.total_steps)] and done.total_steps >= 5
    assert mlx_lm.load(worker.of(m.Checkpoint)[0].path)[0] is not None


def test_sigterm_soon_after_a_checkpoint_exits_without_waiting_for_the_running_step(tmp_path, tiny_model):
    config = endless_slow_run(tmp_path, tiny_model, save_every=1)
    worker = WorkerProcess(config, env={"SLOW_REWARD_S": "5", "SLOW_FROM_CALL": "2"})
    worker.wait_for(m.Checkpoint, timeout=60)
    worker.wait_for(m.Status, lambda e: e.phase == "scoring")  # step 2 sleeps 5 s in its reward
    sent = time.monotonic()
    worker.proc.send_signal(signal.SIGTERM)
    assert worker.finish() == 4  # stopped by a signal
    # the signal is handled once the reward call on the main thread returns (5 s; TRL's thread too), and
    # the step is not waited for: its training would follow
    assert time.monotonic() - sent < 5 + 3
    assert [(c.kind, c.step) for c in worker.of(m.Checkpoint)] == [("periodic", 1)]
    assert worker.of(m.Complete)[0].status == "stopped"
    db = tmp_path / "out" / "outputs.db"
    assert query(db, "SELECT status FROM runs") == [("stopped",)]
    assert query(db, "SELECT max(step) FROM generations") == query(db, "SELECT max(step) FROM steps") == [(1,)]


def test_non_finite_steps_in_a_row_save_an_emergency_checkpoint_keep_the_last_good_one_and_stop(tmp_path, tiny_model):
    config = write_config(tmp_path, tiny_model, rewards=reward_config(tmp_path, "varied"), training={"nan_patience": 2})
    worker = WorkerProcess(config, env={**fake_trainer_env(FAULTY_TRAINER), "FAKE_SKIP_STEPS": "3,4"})
    worker.wait_for(m.Complete)
    assert worker.finish() == 3  # stopped, not completed; no final checkpoint of the failing weights
    assert [(c.kind, c.step) for c in worker.of(m.Checkpoint)] == [("periodic", 2), ("emergency", 4)]
    errors = worker.of(m.Error)
    assert len(errors) == 1 and errors[0].fatal and "2 steps in a row" in errors[0].message
    out = tmp_path / "out"
    assert (out / "last-good-2" / "training_state.json").exists()
    assert mlx_lm.load(str(out / "emergency-4"))[0] is not None


def test_on_nonfinite_checkpoint_saves_the_last_finite_weights_goes_on_and_still_ends_after_ten_times_the_patience(
        tmp_path, tiny_model):
    config = write_config(tmp_path, tiny_model, rewards=reward_config(tmp_path, "varied"),
                          training={"nan_patience": 1, "on_nonfinite": "checkpoint", "max_steps": 14},
                          checkpoint={"save_every": 3})
    skipped = [2, *range(4, 14)]  # one, then ten in a row
    worker = WorkerProcess(config, env={**fake_trainer_env(FAULTY_TRAINER), "FAKE_SKIP_STEPS": ",".join(map(str, skipped))})
    worker.wait_for(m.Complete)
    assert worker.finish() == 3  # ten in a row (10 x nan_patience) still stop the run
    saves = [(c.kind, c.step) for c in worker.of(m.Checkpoint)]
    assert saves == [("emergency", 2), ("periodic", 3), ("emergency", 4), ("periodic", 6), ("periodic", 9),
                     ("periodic", 12)]  # one emergency save per streak, the run going on after each
    assert [e.step for e in worker.of(m.Step)] == list(range(1, 14))
    errors = worker.of(m.Error)
    assert len(errors) == 1 and errors[0].fatal and "10 steps in a row" in errors[0].message
    out = tmp_path / "out"
    assert not (out / "emergency-2").exists()  # replaced by the next streak's save
    assert mlx_lm.load(str(out / "emergency-4"))[0] is not None
    logged = [r[0] for r in query(out / "outputs.db", "SELECT message FROM logs WHERE message LIKE '%and going on%'")]
    assert len(logged) == 2 and "emergency-2" in logged[0] and "emergency-4" in logged[1]
    assert "stops after 10 such steps in a row" in logged[1]


def test_tool_calls_in_real_completions_are_parsed_streamed_and_stored(tmp_path):
    model = build_tool_calling_model(tmp_path / "tool-model")  # a real model whose every turn calls `add`
    config = write_config(
        tmp_path, model, rewards=reward_config(tmp_path, "varied"),
        training={"max_steps": 2}, generation={"max_completion_length": 2},
    )  # fmt: skip
    worker = WorkerProcess(config)
    worker.wait_for(m.Complete)
    assert worker.finish() == 0
    assert all(s.tool_calls and s.tool_calls[0].name == "add" for s in worker.of(m.Sample))
    db = tmp_path / "out" / "outputs.db"
    rows = query(
        db,
        "SELECT g.step, t.call_index, t.name, t.arguments, t.status, t.raw "
        "FROM tool_calls t JOIN generations g ON g.id = t.generation_id",
    )
    assert {r[0] for r in rows} == {1, 2} and query(db, "SELECT count(*) FROM generations") == [(8,)]
    assert len(rows) == 8  # two tokens per completion: one whole call and the end of the turn
    assert {(r[2], json.loads(r[3])["b"], r[4], r[5]) for r in rows} == {("add", 2, "ok", TOOL_CALL_TEXT)}


def test_plain_mode_through_the_cli_prints_one_line_per_step_and_a_loadable_final_model(tmp_path, tiny_model):
    config = write_config(tmp_path, tiny_model, rewards=reward_config(tmp_path, "varied"), store={"enabled": False})
    out = subprocess.run(
        [sys.executable, "-m", "grpo_tui.tui.cli", "worker", str(config), "--plain"],
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300, cwd=ROOT,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    step_lines = [line for line in out.stdout.splitlines() if line.startswith("step ")]
    assert [line.split()[1] for line in step_lines] == ["1/4", "2/4", "3/4", "4/4"]
    assert all("loss" in line and "reward" in line and "varied" in line and "s/step" in line for line in step_lines)
    assert "completed: 4 steps" in out.stdout
    assert not (tmp_path / "out" / "outputs.db").exists()  # store.enabled = false
    model, tokenizer = mlx_lm.load(str(tmp_path / "out" / "final"))
    assert mlx_lm.generate(model, tokenizer, "1 + 1 =", max_tokens=3) is not None


def test_a_quickstart_run_stores_every_generation_with_its_reward_breakdown(tmp_path):
    config = load_config(ROOT / "examples" / "quickstart.toml")  # the shipped model, data and rewards
    config.training.max_steps = 2
    config.checkpoint.output_dir = str(tmp_path / "out")
    path = tmp_path / "quickstart.toml"
    path.write_text(dumps(config.to_dict()))
    worker = WorkerProcess(path)
    worker.wait_for(m.Complete, timeout=300)
    assert worker.finish() == 0
    weights = {r.label: r.weight for r in config.rewards}
    rows = query(tmp_path / "out" / "outputs.db", "SELECT step, reward, reward_details, completion FROM generations")
    assert len(rows) == 2 * config.training.batch_size * config.grpo.group_size
    for _, reward, details, _ in rows:
        breakdown = json.loads(details)
        assert breakdown.keys() == weights.keys()
        expected = sum(weights[k] * v for k, v in breakdown.items() if v is not None)
        assert reward == pytest.approx(expected)


AGENT_TOOLS_PY = '''
def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: first
        b: second
    """
    print("add printing to stdout")  # must not reach the frame channel
    return a + b
'''

AGENT_REWARD_PY = '''
def calls(completions, num_tool_calls, failed_tool_calls, log_extra, **kwargs):
    log_extra("roles", [",".join(m["role"] for m in c) for c in completions])
    assert all(c[0]["tool_calls"][0]["function"]["name"] == "add" for c in completions)
    return [n - f + 0.5 * (c[1]["content"] == "3") for c, n, f in zip(completions, num_tool_calls, failed_tool_calls)]
'''


def test_an_agent_run_calls_its_tools_mid_rollout_and_stores_the_turns(tmp_path):
    model = build_tool_calling_model(tmp_path / "tool-model")  # a real model whose every turn calls `add`
    (tmp_path / "agent_tools.py").write_text(AGENT_TOOLS_PY)
    (tmp_path / "agent_reward.py").write_text(AGENT_REWARD_PY)
    rewards = (f'[[rewards]]\nfunction = "{tmp_path / "agent_reward.py"}:calls"\n'
               f'[[tools]]\nfunction = "{tmp_path / "agent_tools.py"}:add"\ntimeout_s = 5\n')
    config = write_config(tmp_path, model, rewards=rewards, training={"max_steps": 2},
                          generation={"max_completion_length": 80, "max_tool_calls": 1})
    worker = WorkerProcess(config)
    worker.wait_for(m.Complete)
    assert worker.finish() == 0
    assert worker.bad_lines == [] and b"add printing to stdout" in worker.stderr
    assert any("tools: add" in e.message for e in worker.of(m.Log))
    steps = worker.of(m.Step)
    assert [s.extra_metrics["tools/call_frequency"] for s in steps] == [1.0, 1.0]
    assert all(s.extra_metrics["tools/failure_frequency"] == 0.0 and s.reward == 1.5 for s in steps)
    sample = worker.of(m.Sample)[0]
    assert [t.role for t in sample.turns] == ["assistant", "tool", "assistant"]
    assert sample.turns[1].content == "3" and sample.reward_notes == {"roles": "assistant,tool,assistant"}
    db = tmp_path / "out" / "outputs.db"
    stored = query(db, "SELECT turns, num_tokens, raw_completion FROM generations")
    assert len(stored) == 8
    for turns, num_tokens, raw in stored:
        turns = json.loads(turns)
        assert [t["role"] for t in turns] == ["assistant", "tool", "assistant"]
        assert turns[1]["name"] == "add" and turns[1]["arguments"] == {"a": 1, "b": 2} and "seconds" in turns[1]
        assert num_tokens < 80 and "<|im_start|>tool\n3<|im_end|>" in raw  # the tool tokens are not the model's


def test_a_tool_without_type_hints_stops_the_start_with_its_config_key(tmp_path, tiny_model):
    (tmp_path / "bad_tool.py").write_text('def add(a, b):\n    """Add.\n\n    Args:\n        a: One.\n        b: Two.\n    """\n    return a + b\n')
    config = write_config(tmp_path, tiny_model, rewards='[[rewards]]\nname = "length"\n'
                          f'[[tools]]\nfunction = "{tmp_path / "bad_tool.py"}:add"\n')
    worker = WorkerProcess(config)
    worker.wait_for(m.Error)
    assert worker.finish() != 0
    errors = worker.of(m.Error)
    assert errors and errors[0].fatal
    assert errors[0].message == (f"tools[0].function: {tmp_path / 'bad_tool.py'}: parameter 'a' of add has no type hint; "
                                 "annotate it (e.g. a: int or str), since the model is told each parameter's type")


def test_logging_steps_thins_the_plain_lines_and_the_store_keeps_every_step(tmp_path, tiny_model):
    config = write_config(tmp_path, tiny_model, rewards=reward_config(tmp_path, "varied"), logging={"steps": 3})
    out = subprocess.run(
        [sys.executable, "-m", "grpo_tui.tui.cli", "worker", str(config), "--plain"],
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300, cwd=ROOT,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    step_lines = [line for line in out.stdout.splitlines() if line.startswith("step ")]
    assert [line.split()[1] for line in step_lines] == ["3/4", "4/4"]  # every 3rd step, and the last
    assert query(tmp_path / "out" / "outputs.db", "SELECT step FROM steps ORDER BY step") == [(1,), (2,), (3,), (4,)]


def test_each_step_records_its_completions_perplexity_and_token_accuracy(tmp_path, tiny_model):
    config = write_config(tmp_path, tiny_model, rewards=reward_config(tmp_path, "varied"), training={"max_steps": 2})
    worker = WorkerProcess(config)
    worker.wait_for(m.Complete)
    assert worker.finish() == 0, worker.stderr.decode()[-2000:]
    frames = [(s.perplexity, s.token_accuracy) for s in worker.of(m.Step)]
    assert all(p is not None and p > 1.0 and a is not None and 0.0 <= a <= 1.0 for p, a in frames), frames
    stored = query(tmp_path / "out" / "outputs.db", "SELECT perplexity, token_accuracy FROM steps ORDER BY step")
    assert stored == frames  # the store, the Charts tab and browse read these columns


def test_worker_plain_on_a_finished_run_says_nothing_was_trained(tmp_path, tiny_model):
    config = write_config(tmp_path, tiny_model, training={"max_steps": 2, "silent_patience": 0},
                          checkpoint={"resume": "latest"})
    cli = [sys.executable, "-m", "grpo_tui.tui.cli", "worker", str(config), "--plain"]
    first = subprocess.run(cli, capture_output=True, text=True, timeout=300)
    assert first.returncode == 0 and first.stdout.splitlines()[-1].startswith("completed: 2 steps in "), first.stderr
    again = subprocess.run(cli, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    assert again.stdout.splitlines()[-1] == (
        "completed already: the run had trained its 2 steps, nothing was trained now (raise training.max_steps to "
        "train on, or set checkpoint.resume = false to start again)")
