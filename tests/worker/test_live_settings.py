"""Live settings through the real worker (docs/steering.md): ``grpo-tui set`` on a detached run,
the worker's stdin, refusals, and the changes kept over a kill and a resume."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import mlx.core as mx
import pytest

from grpo_tui.protocol import control as c
from grpo_tui.protocol import messages as m
from tests.helpers.runs import CLI, wait_for
from tests.helpers.viewer import Viewer
from tests.helpers.worker_harness import WorkerProcess, query, reward_config, tiny_model, write_config

__all__ = ["tiny_model"]

pytestmark = pytest.mark.slow

SLOW = {"SLOW_REWARD_S": "0.15"}  # a step long enough to pause at and set between


def detached(folder: Path, model: Path, **training: object) -> Path:
    """``grpo-tui run CONFIG --detach`` of a small run whose rewards differ (the weights move)."""
    folder.mkdir()
    config = write_config(folder, model, rewards=reward_config(folder, "slow"),
                          training={"max_steps": 6, "num_epochs": 3, "silent_patience": 0, **training},
                          checkpoint={"save_every": 0, "keep_last": 0}, display={"restart_delay_s": 0.2})
    done = subprocess.run([*CLI, "run", str(config), "--detach"], capture_output=True, text=True, timeout=60,
                          env={**os.environ, **SLOW})
    assert done.returncode == 0, done.stderr
    from grpo_tui.tui.launcher import adopt

    out = (folder / "out").resolve()
    record = c.read_record(out)
    assert record is not None
    adopt(record.pid)
    return out


def grpo_set(out: Path, *items: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, "set", str(out), *items], capture_output=True, text=True, timeout=120)


def frames_of(out: Path, kind: str) -> list[dict]:  # type: ignore[type-arg]
    lines = (out / "run.jsonl").read_text().splitlines()
    return [f for f in map(json.loads, lines) if f.get("type") == kind]


def paused_with_checkpoint(viewer: Viewer) -> int:
    """Pause after a step, save a checkpoint there: the step the next change applies after."""
    viewer.wait_for(m.Step)
    viewer.send(m.Pause())
    n = viewer.wait_for(m.Paused).step
    viewer.send(m.SaveCheckpoint())
    viewer.wait_for(m.Checkpoint, lambda f: f.step == n)
    return n


def weights(folder: Path) -> dict[str, mx.array]:
    return mx.load(str(folder / "model.safetensors"))


def test_a_learning_rate_set_at_step_n_is_used_from_n_plus_1_like_a_resume_at_n_with_it(tmp_path, tiny_model):
    out = detached(tmp_path / "live", tiny_model)
    viewer = Viewer(out)
    n = paused_with_checkpoint(viewer)
    done = grpo_set(out, "training.learning_rate=2e-3")
    assert (done.returncode, done.stdout) == (0, f"training.learning_rate = 0.002 from step {n + 1} (was 0.01)\n"), done.stderr
    viewer.send(m.Resume())
    viewer.wait_for(m.Complete)
    rates = {f["step"]: f["learning_rate"] for f in frames_of(out, "step")}
    assert [round(rates[s], 6) for s in sorted(rates)] == [0.01] * n + [0.002] * (6 - n)
    assert query(out / "outputs.db", "SELECT step, key, new, source FROM setting_changes") == [
        (n + 1, "training.learning_rate", "0.002", "cli")]

    # the same rate from the start of a resume at step n: the same weights
    ref = tmp_path / "ref"
    ref.mkdir()
    config = write_config(ref, tiny_model, rewards=reward_config(ref, "slow"),
                          training={"max_steps": 6, "num_epochs": 3, "silent_patience": 0}, checkpoint={"save_every": 0})
    worker = WorkerProcess(config, "--resume", str(out / f"checkpoint-{n}"), "--set", "training.learning_rate=2e-3",
                           env={"SLOW_REWARD_S": "0"})
    worker.wait_for(m.Complete)
    assert worker.finish() == 0
    a, b = weights(out / "final"), weights(ref / "out" / "final")
    assert max(mx.abs(a[k] - b[k]).max().item() for k in a) < 1e-6
    start = weights(tiny_model)
    assert max(mx.abs(a[k] - start[k]).max().item() for k in a) > 1e-4  # the weights did move

    # grpo-tui compare shows the live change where it happened
    shown = subprocess.run([*CLI, "compare", str(out), str(ref / "out"), "--json"], capture_output=True, text=True, timeout=30)
    assert shown.returncode == 0, shown.stderr
    rows = {d["key"]: d["values"] for d in json.loads(shown.stdout)["differences"]}
    assert rows["training.learning_rate"] == [f"0.01 → 0.002 at step {n + 1}", "0.002"]


def test_a_change_survives_a_sigkill_and_the_restart_and_a_stop_and_resume_latest(tmp_path, tiny_model):
    out = detached(tmp_path / "run", tiny_model, max_steps=8)
    viewer = Viewer(out)
    n = paused_with_checkpoint(viewer)  # the restart resumes from checkpoint-n, before the change
    assert grpo_set(out, "generation.temperature=0.5", "training.learning_rate=3e-3").returncode == 0
    viewer.send(m.Resume())
    viewer.wait_for(m.Step, lambda f: f.step == n + 2)
    record = c.read_record(out)
    assert record is not None
    os.kill(record.worker_pid, signal.SIGKILL)
    viewer.wait_for(m.ResumeState, timeout=60)  # the supervisor restarted it from checkpoint-n
    viewer.wait_for(m.Step, lambda f: f.step == n + 2)
    viewer.send(m.Stop())
    viewer.wait_for(m.Complete)
    wait_for(lambda: not c.is_live(c.read_record(out)), 60)
    after_kill = [f for f in frames_of(out, "step")][-2:]
    assert [round(f["learning_rate"], 6) for f in after_kill] == [0.003, 0.003]
    assert sorted(query(out / "outputs.db", "SELECT step, key FROM setting_changes")) == [
        (n + 1, "generation.temperature"), (n + 1, "training.learning_rate")]  # replayed, recorded once

    ls = subprocess.run([*CLI, "ls", str(out)], capture_output=True, text=True, timeout=30).stdout.splitlines()
    assert ls[0].split()[5] == "CHANGES" and ls[1].split()[6] == "2"  # STARTED is a date and a time
    checked = subprocess.run([*CLI, "check", str(out.parent / "config.toml")], capture_output=True, text=True)
    assert (f"# resuming with 2 live changes: generation.temperature 0.5 since step {n + 1} (file: 1.0); "
            f"training.learning_rate 0.003 since step {n + 1} (file: 0.01)\n") in checked.stdout, checked.stderr
    assert "learning_rate = 0.003" in checked.stdout

    # a stop, then --resume latest: goes on with both; a --set given at the resume wins over its key
    worker = WorkerProcess(out.parent / "config.toml", "--resume", "latest", "--set", "training.max_steps=9",
                           "--set", "generation.temperature=0.9")
    worker.wait_for(m.Complete)
    assert worker.finish() == 0
    [resumed] = worker.of(m.ResumeState)
    assert [(ch.key, ch.new) for ch in resumed.changes] == [("training.learning_rate", 0.003)]
    assert [round(s.learning_rate, 6) for s in worker.of(m.Step)] == [0.003] * (9 - resumed.step)
    logs = [e.message for e in worker.of(m.Log)]
    assert any(f"resuming with 1 live change: training.learning_rate 0.003 since step {n + 1} (file: 0.01)" in t
               for t in logs), logs
    assert any("--set generation.temperature wins over its live change" in t for t in logs), logs


def test_refused_keys_and_bad_values_say_their_sentence_and_change_nothing(tmp_path, tiny_model):
    config = write_config(tmp_path, tiny_model, training={"max_steps": 3, "silent_patience": 0})
    checked = subprocess.run([*CLI, "check", str(config), "--set", "grpo.beta=-1"], capture_output=True, text=True)
    worker = WorkerProcess(config)
    worker.send(m.Pause())
    worker.wait_for(m.Paused)
    worker.send(b"SET grpo.beta=-1\n")  # the plain stdin line
    bad = worker.wait_for(m.SettingRefused)
    assert checked.returncode == 2 and f"grpo-tui: config error: {bad.message}" in checked.stderr  # --set's sentence
    assert bad.source == "stdin"
    worker.send(m.SetSetting(key="training.batch_size", value="4", source="api"))
    refused = worker.wait_for(m.SettingRefused)
    assert "training.batch_size: cannot change in a live run: the data order" in refused.message
    assert "These can: training.learning_rate" in refused.message and "rewards[0].weight" in refused.message
    worker.send(m.SetSetting(key="generation.max_completion_length", value="100000"))
    assert "overflows the model's context" in worker.wait_for(m.SettingRefused).message
    worker.send(m.SetSetting(key="rewards.0.weight", value="0.5"))
    changed = worker.wait_for(m.SettingChanged)
    assert (changed.key, changed.old, changed.new, changed.step) == ("rewards[0].weight", 1.0, 0.5, 1)
    worker.send(m.Resume())
    worker.wait_for(m.Complete)
    assert worker.finish() == 0
    assert len(worker.of(m.SettingChanged)) == 1
    [step] = [s for s in worker.of(m.Step) if s.step == 1]
    assert step.reward is not None


def test_a_set_is_bounded_atomic_and_always_answered(tmp_path, tiny_model):
    """Issue 57.7, 57.9, 57.11: a 5,000-digit or 2,000-deep value is one sentence (the CLI, the worker,
    check); a set with any refused item changes nothing and says so for each item; a line break or a
    temperature that makes every step non-finite is refused; an accepted set says its step."""
    out = detached(tmp_path / "run", tiny_model, max_steps=400, num_epochs=200)
    viewer = Viewer(out)
    viewer.wait_for(m.Step)
    huge, deep = "9" * 5000, "[" * 2000
    for value in (huge, deep):  # straight to the worker, as any viewer may send it
        viewer.send(m.SetSetting(key="training.learning_rate", value=value, id=f"v{len(value)}"))
        refused = viewer.wait_for(m.SettingRefused, lambda f, v=value: f.id == f"v{len(v)}", timeout=60)
        assert "training.learning_rate: --set training.learning_rate: the value" in refused.message
    for item, words in [(f"training.learning_rate={huge}", "holds a number of 5,000 digits; a setting's number has at most 50"),
                        (f"training.learning_rate={deep}", "nests 2000 lists or tables deep"),
                        ("generation.temperature=0.5\n0.7", "the value holds a line break; a value is one line")]:
        done = grpo_set(out, item)
        assert done.returncode == 2 and words in done.stderr and "Traceback" not in done.stderr, done.stderr
    tiny = grpo_set(out, "generation.temperature=1e-45")
    assert tiny.returncode == 2 and "must be at least 0.001" in tiny.stderr, tiny.stderr
    partly = grpo_set(out, "bogus.key=1", "training.learning_rate=7e-6")
    assert partly.returncode == 2 and partly.stdout == "", partly.stdout
    assert "grpo-tui: not applied: bogus.key=1 was refused, and a set changes all its items or none" in partly.stderr
    assert partly.stderr.count("\n") == 2  # one line per item
    both = grpo_set(out, "training.learning_rate=7e-6", "generation.temperature=0.7")
    assert both.returncode == 0, both.stderr
    lines = both.stdout.splitlines()
    assert len(lines) == 2 and lines[0].startswith("training.learning_rate = 7e-06 from step ")
    assert lines[1].startswith("generation.temperature = 0.7 from step ")
    changed = [(f["key"], f["new"]) for f in frames_of(out, "setting_changed")]
    assert changed == [("training.learning_rate", 7e-06), ("generation.temperature", 0.7)]  # the refused set changed nothing
    viewer.send(m.Stop())
    wait_for(lambda: not c.is_live(c.read_record(out)), 120)
    checked = subprocess.run([*CLI, "check", str(tmp_path / "run" / "config.toml"), "--set",
                              f"training.learning_rate={huge}"], capture_output=True, text=True, timeout=120)
    assert checked.returncode == 2 and "at most 50" in checked.stderr and "Traceback" not in checked.stderr


def test_a_refused_set_line_on_a_plain_worker_s_stdin_is_said(tmp_path, tiny_model):
    config = write_config(tmp_path, tiny_model, training={"max_steps": 1, "silent_patience": 0})
    done = subprocess.run([*CLI, "worker", str(config), "--plain"], input="SET bogus.key=1\n", capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "[refused] bogus.key=1: " in done.stdout


def test_compare_shows_a_resume_s_set_over_a_live_change(tmp_path, tiny_model):
    """Issue 57.12: compare showed the live change as the run's value after a resume's --set won over it."""
    config = write_config(tmp_path, tiny_model, training={"max_steps": 2, "silent_patience": 0},
                          checkpoint={"save_every": 0})
    first = WorkerProcess(config)
    first.send(m.SetSetting(key="training.learning_rate", value="7e-6", source="api"))
    first.wait_for(m.Complete)
    assert first.finish() == 0
    second = WorkerProcess(config, "--resume", "latest", "--set", "training.max_steps=3",
                           "--set", "training.learning_rate=3e-6")
    second.wait_for(m.Complete)
    assert second.finish() == 0
    out = tmp_path / "out"
    rows = query(out / "outputs.db", "SELECT step, key, new FROM setting_changes ORDER BY id")
    assert [(k, json.loads(v)) for _, k, v in rows] == [("training.learning_rate", 7e-6), ("training.learning_rate", 3e-6)]
    assert rows[1][0] == 3
    from tests.helpers.run_folders import write_run

    other = write_run(tmp_path / "other", "other", [0.1, 0.2])
    shown = subprocess.run([*CLI, "compare", str(out), str(other), "--json"], capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0, shown.stderr
    [rate] = [d["values"][0] for d in json.loads(shown.stdout)["differences"] if d["key"] == "training.learning_rate"]
    assert rate.endswith("→ 7e-06 at step 1 → 3e-06 at step 3"), rate
