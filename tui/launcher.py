"""Starting a run's supervisor and ending the ones this process started.

``launch`` starts ``python -m grpo_tui.tui.supervisor`` in its own session (so a closed terminal
never reaches it; docs/architecture.md, "Processes"); ``wait_ready`` waits until its socket
answers. A supervisor outlives the dashboard that started it, by design; a script, bench or test
whose runs must not outlive it calls ``end_started``.
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from grpo_tui.common.disk_space import MIN_FREE_BYTES, free_bytes, full_sentence
from grpo_tui.common.run_folder import open_append
from grpo_tui.protocol import control as c
from grpo_tui.protocol.config import Config, DisplayConfig
from grpo_tui.protocol.layout import LOCK_FILE
from grpo_tui.tui.supervisor_worker import kill_group

_started: list[int] = []  # the supervisors this process started (or adopted): what end_started ends


class RunLive(Exception):
    """Another supervisor already runs in this folder."""


class DidNotStart(Exception):
    """The supervisor exited before its socket answered: its last words."""


def start_in_background(config_path: str, config: Config, worker_args: Sequence[str] = ()) -> subprocess.Popen[bytes]:
    """``run --detach`` and a fork from the dashboard: the run's supervisor in its own session, up and
    answering. Raises ``RunLive``, ``OSError``, or ``DidNotStart``."""
    from grpo_tui.common.blas import child_env

    out = str(Path(config.checkpoint.output_dir).resolve())
    argv = [sys.executable, "-m", "grpo_tui.worker", config_path, *worker_args]
    proc = launch(out, argv, config_path=config_path, display=config.display, env=child_env(config.runtime.blas))
    if not asyncio.run(wait_ready(out, proc)):
        raise DidNotStart(supervisor_failure(out))
    return proc


def launch_argv(
    output_dir: str | Path, worker_argv: Sequence[str], *, config_path: str = "",
    display: DisplayConfig | None = None, env: dict[str, str] | None = None, wait_viewer: float = 0.0,
) -> list[str]:
    d = display or DisplayConfig()
    return [
        sys.executable, "-m", "grpo_tui.tui.supervisor", "--output-dir", str(output_dir),
        "--config", str(Path(config_path).resolve()) if config_path else "",
        "--restart-delay", str(d.restart_delay_s), "--max-restarts", str(d.max_restarts),
        *([] if d.restart_on_crash else ["--no-restart"]), "--wait-viewer", str(wait_viewer),
        "--env-json", json.dumps(env or {}), "--", *worker_argv,
    ]


def live_run(output_dir: str | Path) -> str | None:
    """Why no run can start in ``output_dir`` now (another one goes on there, with the command that
    attaches to it), or None."""
    out = Path(output_dir).resolve()
    record = c.read_record(out)
    if c.is_live(record) and record is not None:
        return f"a run is already going in {out} (pid {record.pid}): `grpo-tui attach {shlex.quote(str(out))}`"
    if worker_holds(out):  # a `grpo-tui worker` started by hand: no supervisor record, but its lock
        return (f"a worker is already training in {out} (started without a supervisor, as `grpo-tui worker`); stop it "
                "first, or set checkpoint.output_dir to another folder")
    return None


def worker_holds(out: Path) -> bool:
    """A worker holds the folder's lock (``protocol/layout.py``'s ``LOCK_FILE``) now."""
    try:
        fd = os.open(out / LOCK_FILE, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)
    return False


def launch(output_dir: str | Path, worker_argv: Sequence[str], **options: object) -> subprocess.Popen[bytes]:
    """Start the supervisor in its own session, its output to ``.control/supervisor.log``.
    Raises ``RunLive`` when a run already goes on in the folder."""
    out = Path(output_dir).resolve()
    folder = c.make_private_dir(c.control_dir(out))
    if (busy := live_run(out)) is not None:
        raise RunLive(busy)
    env = options.pop("env", None) or {}
    # only what differs from ours goes on the command line (which other users can read; the rest is inherited)
    extra = {k: v for k, v in env.items() if os.environ.get(k) != v}  # type: ignore[attr-defined]
    with open_append(folder / c.SUPERVISOR_LOG) as log:
        proc = subprocess.Popen(
            launch_argv(out, worker_argv, env=extra, **options),  # type: ignore[arg-type]
            stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
        )
    adopt(proc.pid)
    return proc


def adopt(pid: int) -> None:
    """Count a supervisor started some other way (``grpo-tui run --detach``) among this process's,
    so that ``end_started`` ends it too."""
    _started.append(pid)


def end_started(timeout: float = 10.0) -> None:
    """Stop the runs this process started: SIGTERM each supervisor's group (its worker saves and
    exits), and wait for them."""
    for pid in _started:
        kill_group(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while any(c.pid_alive(pid) for pid in _started) and time.monotonic() < deadline:
        time.sleep(0.05)
    _started.clear()


def ready(output_dir: str | Path, proc: subprocess.Popen[bytes]) -> bool | None:
    """True once the socket exists, False when the supervisor exited, None while it starts."""
    if proc.poll() is not None:
        return False
    record = c.read_record(output_dir)
    return True if record is not None and record.pid == proc.pid and c.socket_path(output_dir).exists() else None


async def wait_ready(output_dir: str | Path, proc: subprocess.Popen[bytes], timeout: float = 30.0) -> bool:
    """Whether the supervisor came up within ``timeout`` (``asyncio.run`` it from plain code)."""
    deadline = time.monotonic() + timeout
    while (state := ready(output_dir, proc)) is None and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    return bool(state)


def supervisor_failure(output_dir: str | Path) -> str:
    """The last lines of a supervisor that did not start; when it wrote none, what the disk says."""
    try:
        text = (c.control_dir(output_dir) / c.SUPERVISOR_LOG).read_text(errors="replace")
    except OSError:
        text = ""
    if text.strip():
        return "\n".join(text.strip().splitlines()[-5:])
    free = free_bytes(output_dir)
    if free is not None and free < 64 * MIN_FREE_BYTES:
        return full_sentence(c.control_dir(output_dir), "the run's supervisor")
    return f"its supervisor exited without a word (its log, {c.control_dir(output_dir) / c.SUPERVISOR_LOG}, is empty)"
