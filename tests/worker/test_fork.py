"""``grpo-tui fork`` through the real worker (docs/steering.md, "Fork a run"): the child starts after
the checkpoint with the changes, holds the parent's steps up to it, and the parent is only read."""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

import pytest

from grpo_tui.protocol import control as c
from grpo_tui.protocol.config import load_config
from tests.helpers.runs import CLI, wait_for
from tests.helpers.worker_harness import WorkerProcess, query, reward_config, tiny_model, write_config

__all__ = ["tiny_model"]

pytestmark = pytest.mark.slow


def fingerprint(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_fork_from_step_2_with_another_temperature_starts_at_3_and_leaves_the_parent_as_it_was(tmp_path, tiny_model):
    from grpo_tui.protocol import messages as m

    config = write_config(tmp_path, tiny_model, rewards=reward_config(tmp_path, "varied"),
                          training={"max_steps": 4, "silent_patience": 0}, checkpoint={"save_every": 2, "keep_last": 0})
    parent = WorkerProcess(config)
    parent.wait_for(m.Complete)
    assert parent.finish() == 0
    out = tmp_path / "out"
    parent_steps = query(out / "outputs.db", "SELECT step, loss, reward FROM steps ORDER BY step")
    for side_file in out.glob("outputs.db-*"):  # what the test's own read left (SQLite's -shm of a reader)
        side_file.unlink()
    before = fingerprint(out)

    child = tmp_path / "child"
    done = subprocess.run([*CLI, "fork", str(out), str(child), "--from", "2", "--set", "generation.temperature=0.5",
                           "--name", "cooler", "--detach"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"Forked {out} at step 2 into {child}: its first step is 3\n")
    from grpo_tui.tui.launcher import adopt

    record = c.read_record(child)
    assert record is not None
    adopt(record.pid)
    wait_for(lambda: not c.is_live(c.read_record(child)), 120)
    assert c.read_record(child).status == "done"  # type: ignore[union-attr]

    frames = [json.loads(line) for line in (child / "run.jsonl").read_text().splitlines()]
    assert [f["step"] for f in frames if f["type"] == "step"] == [3, 4]
    [resumed] = [f for f in frames if f["type"] == "resume_state"]
    assert [h["step"] for h in resumed["history"]] == [1, 2]  # the charts' first steps: the parent's
    child_steps = query(child / "outputs.db", "SELECT step, loss, reward FROM steps ORDER BY step")
    assert child_steps[:2] == parent_steps[:2] and [s[0] for s in child_steps] == [1, 2, 3, 4]

    forked = load_config(child / "config.toml")
    assert forked.generation.temperature == 0.5 and forked.run_name == "cooler"
    assert forked.fork is not None and (forked.fork.parent, forked.fork.step) == (str(out), 2)
    assert json.loads(query(child / "outputs.db", "SELECT config FROM runs")[0][0])["fork"]["step"] == 2
    assert fingerprint(out) == before  # the parent, byte for byte

    ls = subprocess.run([*CLI, "ls", str(tmp_path)], capture_output=True, text=True, timeout=30).stdout.splitlines()
    assert ls[1].endswith("out") and ls[2].endswith("└ child")  # the fork under its parent

    # grpo-tui compare: the one setting the fork changed is the one difference; the fork's own wall time
    shown = subprocess.run([*CLI, "compare", str(out), str(child), "--json"], capture_output=True, text=True, timeout=30)
    assert shown.returncode == 0, shown.stderr
    compared = json.loads(shown.stdout)
    temperature = load_config(config).generation.temperature
    assert compared["differences"] == [{"key": "generation.temperature", "values": [str(temperature), "0.5"]}]
    parent_figures, child_figures = compared["runs"]
    assert (parent_figures["steps"], child_figures["steps"], child_figures["branch_step"]) == (4, 4, 2)
    assert child_figures["best_reward"] == max(r for _, _, r in child_steps)
    assert 0 < child_figures["wall_time_s"] < parent_figures["wall_time_s"]
    table = subprocess.run([*CLI, "compare", str(out), str(child)], capture_output=True, text=True, timeout=30).stdout
    assert "forked from" in table and "out at step 2" in table
    assert [line.split() for line in table.splitlines() if line.startswith("generation.temperature")] == [
        ["generation.temperature", str(temperature), "0.5"]]


def test_a_fork_names_what_is_wrong_in_one_sentence(tmp_path, tiny_model):
    config = write_config(tmp_path, tiny_model, training={"max_steps": 2, "silent_patience": 0})
    config.write_text('name = "quickstart"\n' + config.read_text())  # a name that is not its folder's
    from grpo_tui.protocol import messages as m

    worker = WorkerProcess(config)
    worker.wait_for(m.Complete)
    assert worker.finish() == 0
    out = str(tmp_path / "out")
    before = fingerprint(tmp_path / "out")
    for args, words in [(["--from", "7"], "has no checkpoint of that step (it has steps 2"),
                        (["--set", "model.path=x"], "a fork keeps its parent's model"),
                        (["--set", "grpo.beta=-1"], "grpo.beta: -1.0 must be >= 0")]:
        done = subprocess.run([*CLI, "fork", out, str(tmp_path / "f"), *args], capture_output=True, text=True)
        assert done.returncode == 2 and words in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert not (tmp_path / "f").exists()

    # issue 57.3, 57.8, 57.12 and "Also": the target's mistakes, NEW_DIR after the options as people type it
    inside = tmp_path / "out" / "checkpoint-2" / "x"
    for target, words in [(inside, f"{inside} is inside the parent run {out}, which a fork only reads"),
                          (tmp_path / "out", f"{out} is inside the parent run {out}"),
                          (tmp_path, f"{tmp_path} holds the parent run {out}"),
                          (Path("/dev/null"), "/dev/null is not a folder; name a new folder for the fork"),
                          (Path("/proc/forks/f"), "NEW_DIR: /proc/forks/f is under /proc, which cannot hold files")]:
        done = subprocess.run([*CLI, "fork", out, "--from", "2", "--set", "generation.temperature=0.5", str(target),
                               "--detach"], capture_output=True, text=True, timeout=60)
        assert done.returncode == 2 and words in done.stderr, done.stderr
        assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert fingerprint(tmp_path / "out") == before  # nothing written into the parent

    # without --name a fork is named as its folder (not "quickstart-fork-2" beside a folder out-fork-2)
    done = subprocess.run([*CLI, "fork", out, "--from", "2", "--detach"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    child = tmp_path / "out-fork-2"
    from grpo_tui.tui.launcher import adopt

    if (record := c.read_record(child)) is not None:
        adopt(record.pid)
        wait_for(lambda: not c.is_live(c.read_record(child)), 120)
    assert load_config(child / "config.toml").run_name == "out-fork-2"

    weights = next((tmp_path / "out" / "final").glob("*.safetensors"))
    weights.write_bytes(weights.read_bytes()[:-16])  # a damaged checkpoint: refused, not trained from step 0
    done = subprocess.run([*CLI, "fork", out, "--from", "2", str(tmp_path / "f")], capture_output=True, text=True)
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"--from 2: {out}/final is damaged ({weights.name} is" in done.stderr and "first step" not in done.stdout
    assert not (tmp_path / "f").exists()
