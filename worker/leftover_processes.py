"""What user code left running ends with the run (docs/errors.md, "A run ends when its worker ends").

A reward that runs the model's code, or a tool that starts a server, may leave a process behind:
``subprocess.Popen(["sleep", "600"])`` once, or one per call. At the worker's end every process
it started (its descendants) is ended (SIGTERM, then SIGKILL after a grace period), and so is every
other member of its process group when the worker leads one (under the supervisor, which starts it
in a session of its own: a process that double-forked away from its parent is still in the group).
The log says which. Linux reads ``/proc``; elsewhere ``ps``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Callable

from grpo_tui.protocol.control import pid_alive
from grpo_tui.protocol.messages import LogLevel

GRACE_S = 1.0  # SIGTERM first: a server may want to close its files


@dataclass(frozen=True)
class Proc:
    pid: int
    ppid: int
    pgid: int
    name: str


def _table() -> list[Proc]:
    if sys.platform.startswith("linux"):
        procs = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat", "rb") as f:
                    stat = f.read().decode("utf-8", errors="replace")
            except OSError:
                continue
            name, rest = stat[stat.index("(") + 1 : stat.rindex(")")], stat[stat.rindex(")") + 2 :].split()
            if rest[0] != "Z":  # a zombie is already gone; its parent only has to reap it
                procs.append(Proc(int(entry), int(rest[1]), int(rest[2]), name))
        return procs
    try:
        out = subprocess.run(["ps", "-A", "-o", "pid=,ppid=,pgid=,stat=,comm="], capture_output=True, text=True,
                             timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    procs = []
    for line in out.splitlines():
        parts = line.split(None, 4)
        if len(parts) == 5 and not parts[3].startswith("Z"):
            procs.append(Proc(int(parts[0]), int(parts[1]), int(parts[2]), parts[4]))
    return procs


def leftovers() -> list[Proc]:
    """The processes this one started that still run, and its process group's other members when it
    leads the group."""
    me = os.getpid()
    table = _table()
    children: dict[int, list[Proc]] = {}
    for p in table:
        children.setdefault(p.ppid, []).append(p)
    found: dict[int, Proc] = {}
    todo = [me]
    while todo:
        for child in children.get(todo.pop(), []):
            if child.pid not in found:
                found[child.pid] = child
                todo.append(child.pid)
    if os.getpgrp() == me:
        found.update({p.pid: p for p in table if p.pgid == me and p.pid != me})
    return sorted(found.values(), key=lambda p: p.pid)


def _alive(pid: int) -> bool:
    with contextlib.suppress(ChildProcessError, OSError):
        if os.waitpid(pid, os.WNOHANG)[0] == pid:  # our own child, now reaped
            return False
    return pid_alive(pid)


def end_leftovers() -> list[str]:
    """End what user code left running (SIGTERM, SIGKILL after ``GRACE_S``); each as "name (pid N)"."""
    procs = leftovers()
    for p in procs:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(p.pid, signal.SIGTERM)
    deadline = time.monotonic() + GRACE_S
    while time.monotonic() < deadline and any(_alive(p.pid) for p in procs):
        time.sleep(0.02)
    for p in procs:
        if _alive(p.pid):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(p.pid, signal.SIGKILL)
    for p in procs:
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(p.pid, os.WNOHANG)
    return [f"{p.name} (pid {p.pid})" for p in procs]


def sentence(ended: list[str]) -> str:
    """The log line for what ``end_leftovers`` ended."""
    shown = ", ".join(ended[:10]) + (f" and {len(ended) - 10} more" if len(ended) > 10 else "")
    return (f"the run ended {len(ended)} process{'es' if len(ended) != 1 else ''} that user code (a reward or tool) "
            f"left running: {shown}")


def end_and_say(log: Callable[[LogLevel, str], None]) -> None:
    """A run ends when its worker ends: what user code left running ends with it, and the log says so."""
    if ended := end_leftovers():
        log("warning", sentence(ended))
