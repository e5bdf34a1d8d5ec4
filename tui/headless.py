"""``grpo-tui worker``: the worker as a child process whose end is always explained.

The worker reports its own end (a ``[mistake]`` or ``[crash]`` line, a ``complete`` frame), but a
process that dies without a word (``os._exit`` in a reward or tool, a native crash, a kill) cannot.
This parent passes stdin and stdout through untouched, copies the worker's stderr to its own while
keeping the last lines, and, when the worker died silently, says so: the exit code, the step and
phase it was in (the last ``status`` in the run's log), its last stderr lines and where the log is.
Its exit code is the worker's kind (``protocol/outcome.py``): a silent death is a crash (1).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import deque
from collections.abc import Sequence
from pathlib import Path

from grpo_tui.protocol import messages as m
from grpo_tui.protocol.codec import ProtocolError, decode_event
from grpo_tui.protocol.layout import RUN_LOG_FILE
from grpo_tui.protocol.outcome import Exit, describe

TAIL_LINES = 3  # the worker's last stderr lines quoted when it died without a word


def run_headless(argv: Sequence[str], output_dir: str) -> int:
    """Run the worker ``argv`` to its end; the exit code by kind."""
    started = time.time()
    proc = subprocess.Popen(list(argv), stderr=subprocess.PIPE)
    # Ctrl+C reaches the worker from the terminal itself (same process group): ignoring it here
    # keeps the worker's own stop (a checkpoint first). A SIGTERM sent to this process goes on to it.
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda signum, _frame: proc.send_signal(signum))
    tail: deque[str] = deque(maxlen=TAIL_LINES)
    try:
        assert proc.stderr is not None
        for raw in iter(proc.stderr.readline, b""):
            _write_stderr(raw)
            line = raw.decode("utf-8", errors="replace").rstrip()
            if line.strip():
                tail.append(line)
        code = proc.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if code in (Exit.DONE, Exit.CRASH, Exit.MISTAKE, Exit.NAN_STOP, Exit.STOPPED):
        return code  # the worker said why itself
    print(silent_death(code, list(tail), Path(output_dir) / RUN_LOG_FILE, started), file=sys.stderr, flush=True)
    return Exit.CRASH


def silent_death(code: int, tail: list[str], log: Path, since: float) -> str:
    """What to tell a user whose worker ended without reporting why."""
    where = last_status(log, since)
    during = f" during {where}" if where else ""
    how = describe(code) if code < 0 or code > 128 else f"exited with code {code}"
    text = (f"grpo-tui: the worker {how}{during} without reporting why (a reward or tool function may have "
            "called os._exit(), or native code crashed).")
    if tail:
        text += " Its last output: " + " | ".join(tail) + "."
    if log.is_file() and log.stat().st_mtime >= since:
        text += f" The run's log: {log}"
    return text


def last_status(log: Path, since: float) -> str | None:
    """The last ``status`` frame the run's log holds from this run ("step 3 (scoring)"), if any."""
    try:
        if log.stat().st_mtime < since:
            return None
        with open(log, "rb") as f:
            f.seek(max(0, log.stat().st_size - (1 << 16)))
            lines = f.read().splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        try:
            event = decode_event(line)
        except ProtocolError:
            continue
        if isinstance(event, m.Status):
            return f"{event.message} ({event.phase})" if event.message else event.phase
    return None


def _write_stderr(data: bytes) -> None:
    try:
        os.write(2, data)
    except OSError:  # no stderr to write to: keep reading, the tail still explains the end
        pass
