"""A worker's exit code is believed only with its last frame (docs/errors.md, "What is said").

A worker ends by saying so: a ``complete`` frame (done, stopped, a NaN stop) or a fatal ``error``
(a mistake, a crash). A process that ends without either died: ``os._exit(0)`` in a reward or a
tool, a native crash, a kill. Its exit code, whatever it is (0 would read as "done"), says nothing
then, and the watchers (``grpo-tui worker``, the supervisor, the Python API) report a death with
one sentence instead: the exit code, the step and phase it was in (the run log's last ``status``),
its last output and where the log is.

The run's log (``run.jsonl``) is read from ``offset``, its size when the worker started: earlier
runs' events are before it, and a second worker refused by the folder's lock never writes to it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from grpo_tui.protocol import messages as m
from grpo_tui.protocol.codec import ProtocolError, decode_event, line_prefix

TAIL_LINES = 3  # the worker's last stderr lines quoted when it died without a word

# The frames that matter here, found by how their lines begin (the codec says), so a long run's log
# is not decoded line by line.
_HELLO, _STATUS, _COMPLETE, _ERROR = (line_prefix(m.Hello), line_prefix(m.Status), line_prefix(m.Complete),
                                      line_prefix(m.Error))


def log_size(log: Path) -> int:
    """Where a worker started now begins in the run's log."""
    try:
        return log.stat().st_size
    except OSError:
        return 0


def _lines(log: Path, offset: int) -> Iterator[bytes]:
    try:
        with open(log, "rb") as f:
            f.seek(offset)
            yield from f
    except OSError:
        return


def said_its_end(log: Path, offset: int, pid: int) -> bool | None:
    """Whether worker ``pid`` wrote its last frame (``complete`` or a fatal ``error``) to the log
    after ``offset``; None when its ``hello`` is not there (it stopped before opening the log: a
    config, lock or folder mistake, said on its stdout only)."""
    ours, ended = False, False
    for line in _lines(log, offset):
        if line.startswith(_HELLO):
            event = _decode(line)
            if isinstance(event, m.Hello) and event.pid == pid:
                ours, ended = True, False  # a re-executed worker keeps its pid: the last hello counts
        elif ours and (line.startswith(_COMPLETE) or (line.startswith(_ERROR) and _is_fatal(line))):
            ended = True
    return ended if ours else None


def last_status(log: Path, offset: int) -> str | None:
    """The last ``status`` frame after ``offset`` ("step 3 (scoring)"), if any."""
    size = log_size(log)
    start = max(offset, size - (1 << 16))
    last = None
    for line in _lines(log, start):
        if line.startswith(_STATUS):
            last = line
    event = _decode(last) if last is not None else None
    if isinstance(event, m.Status):
        return f"{event.message} ({event.phase})" if event.message else event.phase
    return None


def silent_death(code: int, tail: list[str], log: Path, offset: int) -> str:
    """One sentence for a worker that ended without its last frame, whatever its exit code."""
    from grpo_tui.protocol.outcome import describe

    where = last_status(log, offset)
    during = f" during {where}" if where else ""
    how = describe(code) if code < 0 or code > 128 else f"exited with code {code}"
    text = (f"the worker {how}{during} without reporting why (a reward or tool function may have "
            "called os._exit(), or native code crashed).")
    if tail:
        text += " Its last output: " + " | ".join(tail) + "."
    if log_size(log) > offset:
        text += f" The run's log: {log}"
    return text


def _is_fatal(line: bytes) -> bool:
    event = _decode(line)
    return isinstance(event, m.Error) and event.fatal


def _decode(line: bytes) -> m.Event | None:
    try:
        return decode_event(line)
    except ProtocolError:
        return None

