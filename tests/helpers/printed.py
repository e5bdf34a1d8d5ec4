"""Running a command the program printed, exactly as printed: in a shell, in the folder the user
was in, with the installed ``grpo-tui`` and ``pip`` first on the PATH (tests/test_printed_commands.py)."""

from __future__ import annotations

import json
import os
import pty
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

from grpo_tui.protocol import control as c

BIN = str(Path(sys.executable).parent)  # the venv's bin: grpo-tui and pip, as an activated venv has them
TEST_ENV_KEYS = ("GRPO_TUI_TEST_TRAINER", "GRPO_TUI_TEST_HIDE", "FAKE_SKIP_STEPS")


def user_env(**extra: str) -> dict[str, str]:
    """A user's shell: the venv first on the PATH, none of the tests' switches."""
    env = {k: v for k, v in os.environ.items() if k not in TEST_ENV_KEYS and k != "PYTHONPATH"}
    return {**env, "PATH": f"{BIN}{os.pathsep}{env.get('PATH', '')}", **extra}


def commands(text: str) -> list[str]:
    """The commands in a message: each in backquotes (the program's convention for a command inside
    a sentence), or the rest of a line after ``Attach:`` / ``Attach again:``."""
    found = re.findall(r"`([^`]+)`", text)
    found += [m.strip() for m in re.findall(r"^Attach(?: again)?: (.+)$", text, flags=re.M)]
    return found


def the_command(text: str, starts: str) -> str:
    """The one command in ``text`` that begins with ``starts``."""
    found = list(dict.fromkeys(cmd for cmd in commands(text) if cmd.startswith(starts)))  # said twice: once
    assert len(found) == 1, f"not one {starts!r} command in:\n{text}"
    return found[0]


def shell(command: str, cwd: Path, timeout: float = 300, **env: str) -> subprocess.CompletedProcess[str]:
    """``command`` typed into a shell in ``cwd``."""
    return subprocess.run(["bash", "-c", command], cwd=cwd, env=user_env(**env), capture_output=True, text=True,
                          timeout=timeout)


def _hangup_default() -> None:
    # a terminal's shell dies of a hang-up, even under a test runner started with nohup (which
    # passes SIGHUP ignored to every child)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


class Terminal:
    """``command`` typed into a shell in a pseudo-terminal (a dashboard needs one), its output kept."""

    def __init__(self, command: str, cwd: Path, size: tuple[int, int] = (120, 40)) -> None:
        master, slave = pty.openpty()
        env = user_env(TERM="xterm-256color", COLUMNS=str(size[0]), LINES=str(size[1]))
        self.proc = subprocess.Popen(["bash", "-c", command], cwd=cwd, env=env, stdin=slave, stdout=slave,
                                     stderr=slave, start_new_session=True, preexec_fn=_hangup_default)
        os.close(slave)
        self.master, self.output = master, bytearray()
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self) -> None:
        while True:
            try:
                data = os.read(self.master, 65536)
            except OSError:
                return
            if not data:
                return
            self.output += data

    def type(self, keys: str) -> None:
        os.write(self.master, keys.encode())

    def text(self) -> str:
        return re.sub(r"\x1b\[[0-9;?]*[a-zA-Z]|\x1b[()][A-Z0-9]|\x1b[=>]|\r", "", self.output.decode(errors="replace"))

    def end(self, out: Path | None = None) -> None:
        """Close the terminal; end the run the command started in ``out`` (its supervisor) too."""
        record = c.read_record(out) if out is not None else None
        if record is not None and c.pid_alive(record.pid):
            os.kill(record.pid, signal.SIGTERM)
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGHUP)
        self.proc.wait(30)
        os.close(self.master)
        if record is not None:
            wait_for(lambda: not c.pid_alive(record.pid), 60)


def wait_for(condition: Callable[[], Any], timeout: float = 120.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        assert time.monotonic() < deadline, f"not met in {timeout:g} s: {what}"
        time.sleep(0.05)
    return value


def frames(out: Path) -> list[dict[str, Any]]:
    """The run's frames so far (run.jsonl), decoded loosely."""
    path = out / "run.jsonl"
    if not path.exists():
        return []
    found = []
    for line in path.read_text(errors="replace").splitlines():
        try:
            found.append(json.loads(line))
        except ValueError:
            continue
    return found


def frame(out: Path, kind: str, since: int = 0) -> dict[str, Any] | None:
    """The first ``kind`` frame of run.jsonl after its first ``since`` frames."""
    return next((f for f in frames(out)[since:] if f.get("type") == kind), None)
