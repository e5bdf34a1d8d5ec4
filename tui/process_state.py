"""What a local process is doing, as its kernel says (Linux ``/proc``), for the dashboard's notice
of a worker that has said nothing for a while (``RunState.silent``). Elsewhere, or for a process on
another machine, nothing is said."""

from __future__ import annotations

_STATES = {"R": "running", "S": "sleeping", "D": "waiting on the disk", "T": "stopped (SIGSTOP or ctrl+z)",
           "t": "stopped by a debugger", "Z": "a zombie (it has ended)", "X": "dead"}


def process_state(pid: int) -> str:
    """``"stopped (SIGSTOP or ctrl+z)"``, ``"running"``, …; ``""`` when it cannot be told."""
    if pid <= 0:
        return ""
    try:
        with open(f"/proc/{pid}/stat") as f:
            code = f.read().rsplit(") ", 1)[1].split()[0]
    except (OSError, IndexError):
        return ""
    return _STATES.get(code, "")
