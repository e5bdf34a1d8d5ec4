"""``grpo-tui worker``: the worker as a child process whose end is always explained.

The worker reports its own end (a ``[mistake]`` or ``[crash]`` line, a ``complete`` frame), but a
process that dies without a word (``os._exit`` in a reward or tool, a native crash, a kill) cannot.
This parent passes stdin and stdout through untouched, copies the worker's stderr to its own while
keeping the last lines, and, when the worker died silently (no ``complete`` or fatal ``error`` in
the run's log after its ``hello``, whatever its exit code: ``common/last_frame.py``), says so: the
exit code, the step and phase it was in, its last stderr lines and where the log is. Its exit code
is the worker's kind (``protocol/outcome.py``): a silent death is a crash (1).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections import deque
from collections.abc import Sequence
from pathlib import Path
from typing import IO

from grpo_tui.common.last_frame import TAIL_LINES, log_size, said_its_end, silent_death
from grpo_tui.protocol.layout import RUN_LOG_FILE
from grpo_tui.protocol.outcome import Exit

DRAIN_S = 2.0  # after the worker's exit: its last stderr lines still in the pipe


def run_headless(argv: Sequence[str], output_dir: str) -> int:
    """Run the worker ``argv`` to its end; the exit code by kind."""
    log = Path(output_dir) / RUN_LOG_FILE
    offset = log_size(log)
    proc = subprocess.Popen(list(argv), stderr=subprocess.PIPE)
    # Ctrl+C reaches the worker from the terminal itself (same process group): ignoring it here
    # keeps the worker's own stop (a checkpoint first). A SIGTERM sent to this process goes on to it.
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda signum, _frame: proc.send_signal(signum))
    tail: deque[str] = deque(maxlen=TAIL_LINES)
    assert proc.stderr is not None
    reader = threading.Thread(target=_copy_stderr, args=(proc.stderr, tail), name="stderr", daemon=True)
    reader.start()
    try:
        code = proc.wait()
        # A process the worker's user code started and that escaped it can hold the pipe open after
        # the worker is gone: the run ends when the worker ends, with what came until then.
        reader.join(DRAIN_S)
    finally:
        # SIGINT stays ignored: a Ctrl-C pressed again as the worker ends would otherwise reach this
        # process on its way out (a KeyboardInterrupt instead of the worker's exit code)
        for sig, handler in previous.items():
            if sig != signal.SIGINT:
                signal.signal(sig, handler)
    said = said_its_end(log, offset, proc.pid)
    # None: its hello is not in the log (it stopped before opening it, and said why on its stdout;
    # or several ranks, whose rank 0 has a pid of its own and whose launcher reports their codes)
    if said or (said is None and code in set(Exit)):
        return code
    print(f"grpo-tui: {silent_death(code, list(tail), log, offset)}", file=sys.stderr, flush=True)
    return Exit.CRASH


def _copy_stderr(stream: IO[bytes], tail: deque[str]) -> None:
    for raw in iter(stream.readline, b""):
        _write_stderr(raw)
        line = raw.decode("utf-8", errors="replace").rstrip()
        if line.strip():
            tail.append(line)


def _write_stderr(data: bytes) -> None:
    try:
        os.write(2, data)
    except OSError:  # no stderr to write to: keep reading, the tail still explains the end
        pass
