"""Asynchronous GRPO ([async], docs/async.md) through the real worker: the generator in a process
of its own, running ahead within max_staleness, the policy step of every generation recorded, a
run that learns, the synchronous step unchanged at max_staleness = 0, a kill -9 resumed with no
step twice, and a generator that fails ending the run (a mistake with its sentence, a crash as one)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import mlx.core as mx
import pytest

from grpo_tui.protocol import messages as m
from grpo_tui.protocol.outcome import Exit
from tests.helpers.worker_harness import WorkerProcess, query, reward_config, tiny_model, write_config

__all__ = ["tiny_model"]

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = ROOT / "examples" / "quickstart.toml"


def children(pid: int) -> list[int]:
    """``pid``'s children, whichever of its threads started them."""
    found = []
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            found += [int(p) for p in (task / "children").read_text().split()]
    except OSError:
        pass
    return found


def generator_pid(worker: WorkerProcess, timeout: float = 60) -> int:
    """The worker's generator process (its child running the generator module)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for pid in children(worker.proc.pid):
            try:
                if b"asynchronous.generator" in Path(f"/proc/{pid}/cmdline").read_bytes():
                    return pid
            except OSError:
                continue
        time.sleep(0.1)
    raise AssertionError("no generator process started")


def gone(pid: int, timeout: float = 30) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()[0]
        except OSError:
            return True
        if state == "Z":
            return True
        time.sleep(0.1)
    return False


def run_to_end(config: Path, *args: str, **env: str) -> WorkerProcess:
    worker = WorkerProcess(config, *args, env=env)
    worker.wait_for(m.Complete, timeout=300)
    assert worker.finish() == 0, worker.stderr.decode()[-3000:]
    return worker


def test_max_staleness_0_is_todays_synchronous_step(tmp_path, tiny_model):
    """The same rewards every step and the same final weights, with [async] max_staleness = 0
    written out as without the section: one process, today's step."""
    runs = {}
    for name, extra in (("plain", {}), ("zero", {"async": {"max_staleness": 0, "weight_sync_steps": 1}})):
        folder = tmp_path / name
        folder.mkdir()
        config = write_config(folder, tiny_model, rewards=reward_config(folder, "varied"),
                              training={"max_steps": 3}, checkpoint={"save_every": 0}, **extra)
        worker = run_to_end(config)
        assert not [line for line in worker.stderr.decode().splitlines() if "generator" in line]
        runs[name] = folder / "out"
    a, b = (query(r / "outputs.db", "SELECT step, reward, loss FROM steps ORDER BY step") for r in runs.values())
    assert a == b and len(a) == 3
    one, two = (mx.load(str(r / "final" / "model.safetensors")) for r in runs.values())
    assert max(mx.abs(one[k] - two[k]).max().item() for k in one) == 0.0
    assert query(runs["zero"] / "outputs.db", "SELECT DISTINCT step - policy_step FROM generations") == [(1,)]


def test_the_generator_runs_ahead_in_its_own_process_within_max_staleness_and_the_run_learns(tmp_path):
    """The quickstart with max_staleness = 2: a separate generator process, every step trained on
    completions at most 2 updates old (each generation records the step whose weights sampled it),
    the off-policy correction measured, and the held-out accuracy rising over 8 steps."""
    out = tmp_path / "out"
    worker = WorkerProcess(QUICKSTART, "--set", "training.max_steps=8", "--set", "async.max_staleness=2",
                           "--set", "eval.every=8", "--set", "eval.limit=100", "--set", "checkpoint.save_every=0",
                           "--set", f'checkpoint.output_dir="{out}"')
    pid = generator_pid(worker)
    assert pid != worker.proc.pid
    worker.wait_for(m.Complete, timeout=300)
    assert worker.finish() == 0, worker.stderr.decode()[-3000:]
    assert gone(pid)  # the generator ends with the run
    steps = worker.of(m.Step)
    assert [s.step for s in steps] == list(range(1, 9))
    stale = [s.extra_metrics["async/staleness_max"] for s in steps]
    assert max(stale) == 2 and all(0 <= x <= 2 for x in stale)
    assert all("sampling/importance_sampling_ratio/mean" in s.extra_metrics and "async/is_clipped" in s.extra_metrics
               for s in steps[1:])
    assert all(0.0 <= s.extra_metrics["async/learner_busy"] <= 1.0 for s in steps)
    rows = query(out / "outputs.db", "SELECT step, MIN(policy_step), MAX(policy_step), COUNT(*) FROM generations GROUP BY step")
    assert [(r[0], r[1] == r[2]) for r in rows] == [(s, True) for s in range(1, 9)]
    assert {r[0] - 1 - r[1] for r in rows} == set(stale) and all(r[0] - 1 - r[1] <= 2 for r in rows)
    evals = {e.step: e.accuracy for e in worker.of(m.Eval)}
    assert evals[8] > evals[0] + 0.05, evals  # it learns (41.5 % at step 0 on the quickstart)
    assert any(e.message.startswith("generator: ") for e in worker.of(m.Log))


@pytest.mark.slow
def test_kill_9_mid_async_run_then_resume_latest_finishes_with_no_step_twice(tmp_path, tiny_model):
    config = write_config(tmp_path, tiny_model, rewards=reward_config(tmp_path, "slow"),
                          training={"max_steps": 8, "num_epochs": 3}, checkpoint={"save_every": 2, "keep_last": 1},
                          **{"async": {"max_staleness": 1}})
    env = {"SLOW_REWARD_S": "0.1"}
    worker = WorkerProcess(config, env=env)
    pid = generator_pid(worker)
    worker.wait_for(m.Step, lambda e: e.step == 5)
    worker.kill()
    assert gone(pid)  # the kernel ends the generator with the worker
    db = tmp_path / "out" / "outputs.db"
    resumed = run_to_end(config, "--resume", "latest", **env)
    assert resumed.of(m.ResumeState)[0].step == 4
    assert query(db, "SELECT step, count(*) FROM steps GROUP BY step ORDER BY step") == [(s, 1) for s in range(1, 9)]
    assert query(db, "SELECT step, count(*) FROM generations GROUP BY step") == [(s, 4) for s in range(1, 9)]
    # the resumed run rolled its queue out again from the checkpoint's weights (step 4)
    assert query(db, "SELECT step - 1 - policy_step FROM generations WHERE step = 5 LIMIT 1") == [(0,)]


def test_a_reward_mistake_in_the_generator_stops_the_run_with_its_sentence(tmp_path, tiny_model):
    (tmp_path / "bad.py").write_text("def short(completions, **kw):\n    return [1.0]\n")
    config = write_config(tmp_path, tiny_model, rewards=f'[[rewards]]\nfunction = "{tmp_path / "bad.py"}:short"\n',
                          **{"async": {"max_staleness": 1}})
    worker = WorkerProcess(config)
    error = worker.wait_for(m.Error, timeout=120)
    assert worker.finish() == Exit.MISTAKE
    assert "short" in error.message and "Traceback" not in error.message


def test_a_generator_that_dies_crashes_the_run_instead_of_hanging(tmp_path, tiny_model):
    config = write_config(tmp_path, tiny_model, rewards=reward_config(tmp_path, "slow"),
                          training={"max_steps": 40, "num_epochs": 20}, checkpoint={"save_every": 0},
                          **{"async": {"max_staleness": 1}})
    worker = WorkerProcess(config, env={"SLOW_REWARD_S": "0.05"})
    pid = generator_pid(worker)
    worker.wait_for(m.Step, lambda e: e.step == 2)
    os.kill(pid, 9)
    assert worker.finish(timeout=60) == Exit.CRASH
    assert "generator" in " ".join(e.message for e in worker.of(m.Error))


def test_max_staleness_changes_live_and_a_synchronous_run_says_why_it_cannot(tmp_path, tiny_model):
    config = write_config(tmp_path, tiny_model, rewards=reward_config(tmp_path, "slow"),
                          training={"max_steps": 12, "num_epochs": 6}, checkpoint={"save_every": 0},
                          **{"async": {"max_staleness": 2}})
    worker = WorkerProcess(config, env={"SLOW_REWARD_S": "0.05"})
    worker.wait_for(m.Step, lambda e: e.step == 4)
    worker.send(m.SetSetting(key="async.max_staleness", value="0", id="k0"))
    changed = worker.wait_for(m.SettingChanged)
    worker.wait_for(m.Complete, timeout=300)
    assert worker.finish() == 0, worker.stderr.decode()[-3000:]
    stale = {s.step: s.extra_metrics["async/staleness_max"] for s in worker.of(m.Step)}
    assert max(stale.values()) == 2
    assert all(stale[s] == 0 for s in range(changed.step + 3, 13)), (changed.step, stale)  # in step, from then on

    (tmp_path / "sync").mkdir()
    sync = write_config(tmp_path / "sync", tiny_model, training={"max_steps": 40, "num_epochs": 20},
                        checkpoint={"save_every": 0})
    plain = WorkerProcess(sync)
    plain.wait_for(m.Step, lambda e: e.step == 1)
    plain.send(m.SetSetting(key="async.max_staleness", value="1", id="k1"))
    refused = plain.wait_for(m.SettingRefused)
    plain.send(m.Stop())
    plain.finish()
    assert "--set async.max_staleness=1" in refused.message and "started synchronous" in refused.message


EXAMPLE_RUNS = {  # (config, --set items): what [async] must work with (docs/async.md, "What runs where")
    "lora_dynamic_sampling": ("quickstart.toml", ["model.lora.rank=4", "grpo.dynamic_sampling=true"]),
    "environment": ("guess_sum.toml", ["generation.max_completion_length=32"]),
    "tools": ("agent_calculator.toml", ["generation.max_completion_length=48"]),
}


@pytest.mark.parametrize("name", sorted(EXAMPLE_RUNS))
def test_async_works_with_lora_dynamic_sampling_an_environment_and_tools(tmp_path, name):
    file, items = EXAMPLE_RUNS[name]
    out = tmp_path / "out"
    args = [f"--set={item}" for item in [*items, "training.max_steps=3", "async.max_staleness=1",
                                         "checkpoint.save_every=0", f'checkpoint.output_dir="{out}"']]
    worker = WorkerProcess(ROOT / "examples" / file, *args, "--set", "eval.at_start=false", "--set", "eval.limit=8")
    worker.wait_for(m.Complete, timeout=300)
    assert worker.finish() == 0, worker.stderr.decode()[-3000:]
    assert [s.extra_metrics["async/staleness_max"] for s in worker.of(m.Step)] == [0, 1, 1]
    assert query(out / "outputs.db", "SELECT DISTINCT step - 1 - policy_step FROM generations ORDER BY 1") == [(0,), (1,)]
    if name == "tools":
        assert query(out / "outputs.db", "SELECT count(*) > 0 FROM tool_calls") == [(1,)]
