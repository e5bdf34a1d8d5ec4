"""A run ends when its worker ends, whatever its user code left running: the processes a reward
started end with the run (the log says which), and ``grpo-tui worker`` returns even when one of
them escaped (double-forked) and still holds the worker's output pipe."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.helpers.mistake_cases import ROOT, custom_reward, write_run

LEAVES = """import subprocess, sys
STARTED = []

def score(completions, **kw):
    if not STARTED:
        STARTED.append(subprocess.Popen({argv!r}))
        with open({pids!r}, "a") as f:
            f.write(str(STARTED[0].pid) + "\\n")
    return [float(len(c) % 3) for c in completions]
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:  # a zombie is gone
        return f.read().rsplit(")", 1)[1].split()[0] != "Z"


def _worker(config: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "grpo_tui.tui.cli", "worker", str(config), "--plain"],
                          capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL, cwd=ROOT)


def test_a_process_a_reward_left_running_ends_with_the_run_and_the_log_says_so(tmp_path):
    pids = tmp_path / "pids"
    config = write_run(tmp_path, rewards=custom_reward(tmp_path, LEAVES.format(argv=["sleep", "600"], pids=str(pids))),
                       training={"silent_patience": 0})
    began = time.monotonic()
    done = _worker(config)
    assert done.returncode == 0, done.stderr[-3000:]
    assert time.monotonic() - began < 60  # before: it never returned while the sleep held its pipe
    [pid] = [int(p) for p in pids.read_text().split()]
    assert not _alive(pid)
    [line] = [x for x in done.stdout.splitlines() if "left running" in x]
    assert line == f"[warning] the run ended 1 process that user code (a reward or tool) left running: sleep (pid {pid})"
    assert "left running: sleep" in (tmp_path / "out" / "run.jsonl").read_text()


def test_grpo_tui_worker_returns_when_an_escaped_process_holds_its_pipe(tmp_path):
    pids = tmp_path / "pids"
    escape = ["sh", "-c", f"sleep 600 & echo $! >> {pids}"]  # the sleep's parent exits: not a descendant any more
    config = write_run(tmp_path, rewards=custom_reward(tmp_path, LEAVES.format(argv=escape, pids=str(tmp_path / "sh"))),
                       training={"silent_patience": 0})
    try:
        done = _worker(config)
        assert done.returncode == 0 and "completed: 2 steps" in done.stdout, done.stderr[-3000:]
    finally:
        for pid in [int(p) for p in pids.read_text().split()] if pids.exists() else []:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
