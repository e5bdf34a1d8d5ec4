"""The run's control socket: where it lives, what the supervisor adds to the worker's frames, and the
record ``grpo-tui ls`` reads (docs/architecture.md, "Processes"; docs/long-runs.md).

A run is owned by its supervisor (``python -m grpo_tui.tui.supervisor``), not by a dashboard. The
supervisor serves the worker's frames, byte for byte, to every viewer on a Unix domain socket and
forwards their commands to the worker::

    <output_dir>/.control/          mode 0700: only the user can enter it
        control.sock                mode 0600: the socket (viewers connect here)
        supervisor.json             the run's record: pid, status, step, last reward (``RunRecord``)
        supervisor.log              the supervisor's own output
        worker.stderr               every line the worker wrote to stderr

What goes over the socket, the worker's frames and the supervisor's own (``welcome``,
``worker_started``, ``stderr_line``, ``worker_exit``, the ``restart`` command), is declared in
protocol/messages.py and read and written by protocol/codec.py, as every other line.
"""

from __future__ import annotations

import contextlib
import os
import stat
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

import msgspec

from grpo_tui.protocol import messages as m

CONTROL_DIR = ".control"
SOCKET_FILE = "control.sock"
RECORD_FILE = "supervisor.json"
SUPERVISOR_LOG = "supervisor.log"
STDERR_FILE = "worker.stderr"

# What ``grpo-tui ls`` shows; "nan_stop" is a run that stopped itself after non-finite steps.
RunStatus = Literal[
    "starting", "running", "paused", "restarting", "stopping", "done", "stopped", "crashed", "mistake", "nan_stop",
    "unrewarded",
]
LIVE_STATUSES = ("starting", "running", "paused", "restarting", "stopping")


class RunRecord(msgspec.Struct, kw_only=True):
    """``supervisor.json``: what ``grpo-tui ls`` and ``attach`` read without connecting."""

    pid: int
    output_dir: str
    config: str = ""
    overrides: list[str] = []  # the run's ``--set KEY=VALUE`` items, over ``config`` (attach reads the run's config so)
    started_at: float = 0.0
    updated_at: float = 0.0
    status: RunStatus = "starting"
    step: int = 0
    total_steps: int = 0
    last_reward: float | None = None
    worker_pid: int = 0
    exit_code: int | None = None
    reason: str = ""
    restarts: int = 0
    jsonl_offset: int = 0
    viewers: int = 0
    changes: int = 0  # live changes the run goes on with (docs/steering.md)


def refusal(first: m.Event) -> str | None:
    """Why a worker whose first frame is ``first`` must be refused (None: it speaks our protocol)."""
    if isinstance(first, m.Hello) and first.protocol_version == m.PROTOCOL_VERSION:
        return None
    got = f"protocol version {first.protocol_version}" if isinstance(first, m.Hello) else f"a {type(first).__name__} frame"
    return (
        f"refused the worker: it speaks {got} (its first frame must be a hello), this dashboard speaks "
        f"protocol version {m.PROTOCOL_VERSION}. Install matching versions of grpo-tui."
    )


def control_dir(output_dir: str | Path) -> Path:
    return Path(output_dir) / CONTROL_DIR


def socket_path(output_dir: str | Path) -> Path:
    return control_dir(output_dir) / SOCKET_FILE


def make_private_dir(path: Path) -> Path:
    """Create ``path`` (mode 0700) or tighten it; refuse a folder someone else owns."""
    path.mkdir(parents=True, exist_ok=True)
    info = path.lstat()
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
        raise PermissionError(f"{path} is not a folder of yours; remove it and start the run again")
    if stat.S_IMODE(info.st_mode) != 0o700:
        os.chmod(path, 0o700)
    return path


@contextlib.contextmanager
def socket_address(path: Path) -> Iterator[str]:
    """An address for bind/connect: the path itself, or (a path over the ~104-byte limit of
    ``sun_path``) the same file reached through an open handle on its folder (Linux)."""
    text = str(path)
    if len(text.encode()) < 100 or not sys.platform.startswith("linux"):
        yield text
        return
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        yield f"/proc/self/fd/{fd}/{path.name}"
    finally:
        os.close(fd)


def read_record(output_dir: str | Path) -> RunRecord | None:
    try:
        return msgspec.json.decode((control_dir(output_dir) / RECORD_FILE).read_bytes(), type=RunRecord)
    except (OSError, msgspec.DecodeError, msgspec.ValidationError):
        return None


def write_record(record: RunRecord) -> None:
    """Atomic: a reader sees the old record or the new one, never half of one."""
    record.updated_at = time.time()
    folder = control_dir(record.output_dir)
    tmp = folder / f".{RECORD_FILE}.tmp"
    try:  # a new file, never written through a link left in its place
        tmp.unlink()
    except FileNotFoundError:
        pass
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    with os.fdopen(fd, "wb") as f:
        f.write(msgspec.json.format(msgspec.json.encode(record)))
    os.replace(tmp, folder / RECORD_FILE)


def pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie answers kill(0) but is gone
        with open(f"/proc/{pid}/stat") as f:
            return not f.read().split(") ")[1].startswith("Z")
    except (OSError, IndexError):
        return True


def is_live(record: RunRecord | None) -> bool:
    """The record's supervisor still runs (and so the socket answers)."""
    return record is not None and record.status in LIVE_STATUSES and pid_alive(record.pid)


def status_of_exit(code: int, completed: m.Complete | None) -> RunStatus:
    """The final status for a worker's exit code (protocol/outcome.py's kinds)."""
    from grpo_tui.protocol.outcome import Exit

    if code == Exit.DONE:
        return "stopped" if completed is not None and completed.status == "stopped" else "done"
    kinds: dict[int, RunStatus] = {Exit.MISTAKE: "mistake", Exit.NAN_STOP: "nan_stop", Exit.STOPPED: "stopped",
                                   Exit.UNREWARDED: "unrewarded"}
    return kinds.get(code, "crashed")


# A worker started with this variable set to "1" (GRPOTrainer does, when it has callbacks) waits
# after each step (its frame, evaluations and checkpoint), paused, says ``step_barrier``, and goes
# on when its follower answers ``resume`` (or ``stop``): a callback's verdict, on_evaluate's too,
# then lands before the next step begins.
STEP_BARRIER_ENV = "GRPO_TUI_STEP_BARRIER"
