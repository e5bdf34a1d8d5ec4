"""What ``supervisor.json`` and ``grpo-tui ls`` say of a run matches what happened (issue 57.12): a
user's stop is said as a stop, not as an older stderr line of the run; after the supervisor is
killed, ``ls`` shows the step the run log reached, not the record's older one; a run of
``grpo-tui worker --plain`` shows its total and when it started, however long its log."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

from grpo_tui.protocol import control as c
from grpo_tui.protocol import messages as m
from grpo_tui.protocol.codec import encode
from grpo_tui.tui.runs import TAIL_BYTES, format_runs, run_info
from tests.helpers.runs import CLI, wait_for
from tests.helpers.viewer import Viewer
from tests.helpers.worker_harness import tiny_model, write_config

__all__ = ["tiny_model"]

NOISY = '''
import sys

def noisy(completions, **kwargs):
    print("an old warning of the reward", file=sys.stderr, flush=True)
    return [float(len(c)) for c in completions]
'''


def detached(folder: Path, model: Path) -> Path:
    (folder / "noisy.py").write_text(NOISY)
    config = write_config(folder, model, rewards=f'[[rewards]]\nfunction = "{folder / "noisy.py"}:noisy"\n',
                          training={"max_steps": 100_000, "num_epochs": 10_000, "silent_patience": 0},
                          checkpoint={"save_every": 0})
    done = subprocess.run([*CLI, "run", str(config), "--detach"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    out = (folder / "out").resolve()
    record = c.read_record(out)
    assert record is not None
    from grpo_tui.tui.launcher import adopt

    adopt(record.pid)
    return out


def last_logged_step(out: Path) -> int:
    if not (out / "run.jsonl").exists():
        return 0
    steps = [json.loads(line)["step"] for line in (out / "run.jsonl").read_text().splitlines()
             if line.strip() and json.loads(line).get("type") == "step"]
    return max(steps, default=0)


def test_a_user_stop_is_recorded_as_a_stop_not_an_old_stderr_line(tmp_path, tiny_model):
    out = detached(tmp_path, tiny_model)
    viewer = Viewer(out)
    viewer.wait_for(m.Step)
    wait_for(lambda: "an old warning" in (out / ".control" / "worker.stderr").read_text())
    viewer.send(m.Stop())
    wait_for(lambda: not c.is_live(c.read_record(out)), 120)
    record = c.read_record(out)
    assert record is not None and record.status == "stopped"
    assert "old warning" not in record.reason and record.reason == "stopped"


def test_ls_after_the_supervisor_was_killed_shows_the_step_the_run_reached(tmp_path, tiny_model):
    out = detached(tmp_path, tiny_model)
    wait_for(lambda: last_logged_step(out) >= 2)
    record = c.read_record(out)
    assert record is not None
    os.kill(record.pid, signal.SIGKILL)  # the supervisor; its worker sees its stdin close and stops
    wait_for(lambda: not c.pid_alive(record.worker_pid), 120)
    reached = last_logged_step(out)
    ls = subprocess.run([*CLI, "ls", str(out.parent)], capture_output=True, text=True, timeout=30)
    [line] = [line for line in ls.stdout.splitlines() if line.rstrip().endswith(" out")]
    assert f" {reached}/" in line, (reached, ls.stdout)


def test_ls_of_a_long_plain_run_shows_its_total_and_when_it_started_not_when_it_ended(tmp_path, tiny_model):
    config = write_config(tmp_path, tiny_model, training={"max_steps": 2}, checkpoint={"save_every": 0})
    done = subprocess.run([*CLI, "worker", str(config), "--plain"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    log = tmp_path / "out" / "run.jsonl"
    lines = log.read_bytes().splitlines(keepends=True)
    first_log = next(json.loads(line)["time"] for line in lines if json.loads(line)["type"] == "log")
    # as a long run's log: more than ls reads of its end between the start (init) and the last step
    busy = encode(m.Status(phase="training", message="step")) * (TAIL_BYTES // 40)
    at = next(i for i, line in enumerate(lines) if json.loads(line)["type"] == "epoch_start")
    log.write_bytes(b"".join(lines[:at]) + busy + b"".join(lines[at:]))
    info = run_info(tmp_path / "out")
    assert info is not None and (info.status, info.step, info.total_steps) == ("done", 2, 2)
    assert info.started_at == first_log != log.stat().st_ctime
    ls = subprocess.run([*CLI, "ls", str(tmp_path)], capture_output=True, text=True, timeout=30)
    assert format_runs([info], tmp_path)[1] in ls.stdout and " 2/2 " in ls.stdout
