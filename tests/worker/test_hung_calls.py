"""A tool that never returns costs a bounded number of threads, over any number of steps, and is
reported once; a call in Python code is reclaimed at its timeout."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from grpo_tui.protocol import messages as m
from grpo_tui.worker.engine.scoring import timed_calls
from tests.helpers.worker_harness import WorkerProcess, build_tool_calling_model, query, write_config

HUNG_TOOLS_PY = '''
import threading

def add(a: int, b: int) -> int:
    """Add two integers, or rather never return.

    Args:
        a: first
        b: second
    """
    threading.Event().wait()  # blocked in C: no exception reaches it
    return a + b
'''

REWARD_PY = '''
def failed(completions, failed_tool_calls, **kwargs):
    return [float(f) for f in failed_tool_calls]
'''


def _threads(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    raise AssertionError("no Threads line")


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads /proc")
def test_fifty_steps_of_a_tool_that_never_returns_keep_the_worker_s_threads_bounded(tmp_path):
    model = build_tool_calling_model(tmp_path / "tool-model")  # every turn calls `add`
    (tmp_path / "hung.py").write_text(HUNG_TOOLS_PY)
    (tmp_path / "reward.py").write_text(REWARD_PY)
    rewards = (f'[[rewards]]\nfunction = "{tmp_path / "reward.py"}:failed"\n'
               f'[[tools]]\nfunction = "{tmp_path / "hung.py"}:add"\ntimeout_s = 0.05\n')
    # every call fails alike, so every reward is the same: silent_patience = 0 lets it train on anyway
    config = write_config(tmp_path, model, rewards=rewards, training={"max_steps": 50, "silent_patience": 0},
                          generation={"max_completion_length": 80, "max_tool_calls": 1},
                          checkpoint={"save_every": 0})
    worker = WorkerProcess(config)
    counts = {}
    for step in (5, 25, 49):
        worker.wait_for(m.Step, lambda e, step=step: e.step == step, timeout=300)
        counts[step] = _threads(worker.proc.pid)
    assert worker.finish(timeout=300) == 0
    # each step makes 4 calls; before the bound, 50 steps would have left 200 hung threads
    assert counts[49] == counts[25] <= counts[5] + timed_calls.MAX_HUNG, counts
    hung = [e.message for e in worker.of(m.Log) if "stays hung" in e.message]
    assert len(hung) == 1 and "tool 'add'" in hung[0] and "timeout_s = 0.05" in hung[0]
    # each completion's first call ran and failed (its second is past max_tool_calls: never run)
    errors = query(tmp_path / "out" / "outputs.db", "SELECT DISTINCT error FROM tool_calls WHERE call_index = 0")
    assert all(e is not None for (e,) in errors)
    assert any("timed out" in e for (e,) in errors) and any("still hung" in e for (e,) in errors)


def test_a_call_in_python_code_is_reclaimed_and_one_blocked_in_c_is_bounded():
    def spin() -> None:
        while True:
            time.sleep(0.001)

    stop = threading.Event()
    before = threading.active_count()
    for _ in range(5):
        with pytest.raises(TimeoutError, match="timed out after 0.02s"):
            timed_calls.call(spin, {}, 0.02, "spin")
    time.sleep(0.05)
    assert threading.active_count() == before and timed_calls.hung_threads("spin") == 0  # reclaimed
    for _ in range(timed_calls.MAX_HUNG + 5):
        with pytest.raises(TimeoutError):
            timed_calls.call(stop.wait, {}, 0.01, "blocked")
    assert timed_calls.hung_threads("blocked") == timed_calls.MAX_HUNG
    assert threading.active_count() == before + timed_calls.MAX_HUNG
    with pytest.raises(timed_calls.StillHung, match="blocked is still hung"):
        timed_calls.call(stop.wait, {}, 0.01, "blocked")
    assert [r for r in timed_calls.take_reports() if r.startswith("blocked stays hung")]
    stop.set()  # the calls return: their places are free again
    time.sleep(0.05)
    assert timed_calls.hung_threads("blocked") == 0
    assert timed_calls.call(lambda: 7, {}, 1.0, "blocked") == 7


FAILING_TOOL_PY = '''
def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: first
        b: second
    """
    raise ConnectionError("the adding service is down")
'''


def test_a_tool_error_with_no_room_left_in_the_completion_is_still_stored_and_filtered(tmp_path):
    from grpo_tui.tui.db import GenFilter, open_readonly
    from grpo_tui.tui.db import queries

    model = build_tool_calling_model(tmp_path / "tool-model")  # every turn calls `add`
    (tmp_path / "failing.py").write_text(FAILING_TOOL_PY)
    (tmp_path / "reward.py").write_text(REWARD_PY)
    rewards = (f'[[rewards]]\nfunction = "{tmp_path / "reward.py"}:failed"\n'
               f'[[tools]]\nfunction = "{tmp_path / "failing.py"}:add"\n')
    # the error's tool message is ~40 tokens: it does not fit in 12
    config = write_config(tmp_path, model, rewards=rewards, training={"max_steps": 1},
                          generation={"max_completion_length": 12, "max_tool_calls": 1})
    worker = WorkerProcess(config)
    worker.wait_for(m.Complete)
    assert worker.finish() == 0
    (step,) = worker.of(m.Step)
    assert step.extra_metrics["tools/failure_frequency"] == 1.0 and step.reward == 1.0  # failed_tool_calls saw it
    db = tmp_path / "out" / "outputs.db"
    errors = query(db, "SELECT error FROM tool_calls")
    assert len(errors) == 4 and all("ConnectionError: the adding service is down" in e for (e,) in errors)
    conn = open_readonly(db)
    failed = queries.generations_page(conn, GenFilter(run_id=1, tool_status="error")).rows
    assert len(failed) == 4 and all(r.finish_reason == "length" for r in failed)
