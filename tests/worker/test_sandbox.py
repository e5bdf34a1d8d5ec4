"""grpo_tui.sandbox against hostile code: each call returns a readable error and the caller goes on;
then a ``sandbox = true`` tool through the real worker, whose run goes on while every call fails."""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

import pytest

from grpo_tui.protocol import messages as m
from grpo_tui.sandbox import Limits, call, run_python
from tests.helpers.worker_harness import WorkerProcess, build_tool_calling_model, query, write_config

LINUX = sys.platform.startswith("linux")
ROOT_USER = os.geteuid() == 0

HOSTILE = {
    "fork bomb": ("import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n",
                  Limits(timeout_s=2, max_processes=8), "timed out after 2 s (wall clock); the call and everything it "
                                                            "started were killed"),
    "infinite loop": ("while True:\n    pass\n", Limits(timeout_s=20, cpu_s=1), "used more than 1 s of CPU time and was stopped"),
    "sleep": ("import time\ntime.sleep(60)\n", Limits(timeout_s=1), "timed out after 1 s (wall clock)"),
    "memory hog": ("x = bytearray(8 << 30)\n", Limits(memory_mb=256), "ran out of memory (memory_mb = 256): MemoryError"),
    "10 GB write": ("with open('big', 'wb') as f:\n    for _ in range(10 * 1024):\n        f.write(bytes(1 << 20))\n",
                    Limits(file_size_mb=8), "wrote a file past the file size limit (file_size_mb = 8): OSError: [Errno 27] File too large"),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_code_is_stopped_with_a_readable_error(name):
    code, limits, error = HOSTILE[name]
    if name == "memory hog" and not LINUX:
        pytest.skip("macOS does not enforce the address-space limit")
    result = run_python(code, limits=limits)
    assert not result.ok and result.error is not None and result.error.startswith(error), result
    assert result.seconds < limits.timeout_s + 5


def test_what_is_contained_on_this_platform_is_reported():
    result = run_python("print('hello')")
    assert result.ok and result.stdout == "hello\n" and result.error is None
    if LINUX and ROOT_USER:
        assert set(result.contained) == {"network", "user"}


@pytest.mark.skipif(not (LINUX and ROOT_USER), reason="a network namespace and a user change need root on Linux")
def test_no_network_no_private_files_and_nothing_outside_its_folder_changes(tmp_path):
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    (private / "id_ed25519").write_text("SECRET KEY")  # as ~/.ssh holds one
    # the sandbox's own folders only: other tests (pytest-xdist's workers) write the temp folder meanwhile
    before = sorted(n for n in os.listdir(tempfile.gettempdir()) if n.startswith("grpo-tui-sandbox-"))
    code = (f"import os, socket\nprint(os.getcwd() == os.environ['HOME'])\nopen('scratch.txt', 'w').write('mine')\n"
            f"for attempt in ('read', 'write', 'connect'):\n"
            f"    try:\n"
            f"        if attempt == 'read': print(open({str(private / 'id_ed25519')!r}).read())\n"
            f"        elif attempt == 'write': open({str(private / 'planted')!r}, 'w').write('x')\n"
            f"        else: socket.create_connection(('1.1.1.1', 80), timeout=3)\n"
            f"    except OSError as exc:\n"
            f"        print(attempt, 'refused:', type(exc).__name__)\n")
    result = run_python(code)
    assert result.ok, result
    assert result.stdout.splitlines() == ["True", "read refused: PermissionError", "write refused: PermissionError",
                                          "connect refused: OSError"]
    assert os.listdir(private) == ["id_ed25519"]
    assert sorted(n for n in os.listdir(tempfile.gettempdir()) if n.startswith("grpo-tui-sandbox-")) == before  # its folder went with it


def test_a_tool_function_is_called_with_its_arguments(tmp_path):
    (tmp_path / "tools.py").write_text("def add(a: int, b: int) -> int:\n    return a + b\n")
    result = call(f"{tmp_path / 'tools.py'}:add", {"a": 2, "b": 5})
    assert result.ok and result.value == 7


SANDBOXED_TOOL = '''import os
MODE = open(os.path.join(os.path.dirname(__file__), "mode")).read().strip()  # read before the call's limits

def add(a: int, b: int) -> int:
    """Add two numbers.

    Args:
        a: the first number
        b: the second number
    """
    if MODE == "hang":
        while True:
            pass
    return a + b
'''

REWARD = "def score(completions, **kw):\n    return [float(len(str(c)) % 3) for c in completions]\n"


@pytest.mark.parametrize("mode", ["add", "hang"])
def test_a_sandboxed_tool_through_the_worker(tmp_path, mode):
    model = build_tool_calling_model(tmp_path / "tool-model")  # every turn calls add(1, 2)
    (tmp_path / "tools.py").write_text(SANDBOXED_TOOL)
    (tmp_path / "mode").write_text(mode)
    (tmp_path / "reward.py").write_text(REWARD)
    rewards = (f'[[rewards]]\nfunction = "{tmp_path / "reward.py"}:score"\n'
               f'[[tools]]\nfunction = "{tmp_path / "tools.py"}:add"\ntimeout_s = 1\nsandbox = true\n')
    config = write_config(tmp_path, model, rewards=rewards, training={"max_steps": 1, "silent_patience": 0},
                          generation={"max_completion_length": 40, "max_tool_calls": 1}, checkpoint={"save_every": 0})
    worker = WorkerProcess(config)
    worker.wait_for(m.Complete, timeout=300)
    assert worker.finish() == 0, worker.stderr.decode()[-3000:]  # the run goes on
    db = tmp_path / "out" / "outputs.db"
    errors = {e for (e,) in query(db, "SELECT error FROM tool_calls WHERE call_index = 0")}
    results = {t["content"] for (turns,) in query(db, "SELECT turns FROM generations") for t in json.loads(turns)
               if t["role"] == "tool"}
    if mode == "add":
        assert errors == {None} and results == {"3"}
    else:
        error = "add timed out after 1 s (wall clock); the call and everything it started were killed"
        assert errors == {error} and results == {f"Error: {error}"}


DAEMON = """
import os, sys, time
pid = os.fork()
if pid == 0:
    os.setsid()  # a session of its own: out of the call's process group
    if os.fork() == 0:
        print(os.getpid(), file=sys.stderr, flush=True)
        time.sleep(40)
    os._exit(0)
os.waitpid(pid, 0)
time.sleep(0.3)
print("done")
"""


@pytest.mark.skipif(not LINUX, reason="the keeper is a Linux child subreaper")
@pytest.mark.parametrize("then", ["", "time.sleep(30)\n"])
def test_a_daemon_that_left_the_session_ends_with_the_call(then):
    """Issue 57.6: a grandchild that forked and called setsid neither outlives the call nor holds it
    past its time limit (it used to return 40 s late, as ok)."""
    import time

    began = time.monotonic()
    result = run_python(DAEMON + then, limits=Limits(timeout_s=4))
    took = time.monotonic() - began
    grandchild = int(result.stderr.split()[0])
    assert took < 12, took
    assert result.ok == (not then) and (result.stdout.strip() == "done" if not then else "timed out after 4 s" in result.error)
    with pytest.raises(ProcessLookupError):
        os.kill(grandchild, 0)
