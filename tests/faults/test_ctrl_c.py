"""Ctrl-C twice on ``grpo-tui worker --plain``: the first stops after the running step and a
checkpoint (exit 4); a second one, however late it lands (during the worker's teardown, or as
``grpo-tui worker`` itself returns), never turns that into a death or a traceback."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from tests.helpers.mistake_cases import ROOT, custom_reward, write_run

SLOW = "import time\ndef score(completions, **kw):\n    time.sleep(0.2)\n    return [float(len(c) % 3) for c in completions]\n"


def test_ctrl_c_pressed_again_and_again_after_the_stop_still_exits_4(tmp_path):
    config = write_run(tmp_path, rewards=custom_reward(tmp_path, SLOW), training={"max_steps": 50, "silent_patience": 0})
    # its own process group, as a terminal's job is: Ctrl-C reaches every process of the group
    proc = subprocess.Popen([sys.executable, "-m", "grpo_tui.tui.cli", "worker", str(config), "--plain"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True, cwd=ROOT)
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith("step 2"):
            break
    os.killpg(proc.pid, signal.SIGINT)
    for line in proc.stdout:
        if line.startswith("checkpoint"):  # stopping: from here on every further press lands in the teardown
            break
    while proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGINT)
        except ProcessLookupError:
            break
        time.sleep(0.002)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 4, err[-3000:]
    assert "Traceback" not in err and "KeyboardInterrupt" not in err and "without reporting why" not in err
